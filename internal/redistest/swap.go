package redistest

import "os"

// EnvSwap names the environment variable that names the server binary a test swaps a
// running server for (an absolute path or a name on PATH): another build or version started
// on the same port and data. Unset or empty, the test restarts the server's own binary.
const EnvSwap = "DISTSYNC_REDIS_SWAP"

// SwapBin returns the path of the binary [EnvSwap] names, or "" if it names none. Like the
// other binaries, one named but not found is an error, never a skip.
func SwapBin() (string, error) {
	if os.Getenv(EnvSwap) == "" {
		return "", nil
	}
	return lookBin(EnvSwap, "")
}
