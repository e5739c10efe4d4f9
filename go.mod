module github.com/distsync/distsync

go 1.26.8

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/creack/pty v1.1.24
	github.com/redis/rueidis v1.0.79
	golang.org/x/sys v0.47.0
)

require (
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/time v0.16.0 // indirect
)
