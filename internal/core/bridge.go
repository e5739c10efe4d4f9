package core

// Package distsync sets these at init. They let a primitive package reach the core of a
// *distsync.Handle and hand out a *distsync.Lease without either direction being part of the
// public API (the same pattern as grpc's internal package).
var (
	handleOf  func(h any) *Handle
	wrapLease func(l *Lease) any
)

// Bridge installs the conversions; only package distsync calls it.
func Bridge(of func(h any) *Handle, wrap func(l *Lease) any) {
	handleOf, wrapLease = of, wrap
}

// Of returns the core of a *distsync.Handle (nil for a nil handle).
func Of(h any) *Handle { return handleOf(h) }
