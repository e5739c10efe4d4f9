package core

import (
	"context"
	"sync"
)

// Locker adapts a primitive's Lock and Unlock to sync.Locker, calling them with
// context.Background(). sync.Locker has no error to return, so it panics on any error, with
// the message "<what>.Lock: <error>" (or Unlock): the one documented exception to "errors are
// returned, not panicked".
func Locker(what string, lock, unlock func(context.Context) error) sync.Locker {
	return locker{what, lock, unlock}
}

type locker struct {
	what         string
	lock, unlock func(context.Context) error
}

func (l locker) Lock() {
	if err := l.lock(context.Background()); err != nil {
		panic(l.what + ".Lock: " + err.Error())
	}
}

func (l locker) Unlock() {
	if err := l.unlock(context.Background()); err != nil {
		panic(l.what + ".Unlock: " + err.Error())
	}
}
