package core

// Package distsync installs these when it is initialised: the core cannot name its types (it
// imports the core), so they cross as any, and internal/api gives them their types back for
// the primitive packages (the pattern of grpc's internal package). Nothing else reads them.
var (
	handleOf  func(h any) *Handle // nil for a nil *distsync.Handle
	wrapLease func(l *Lease) any  // the *distsync.Lease of l
	wrapOpt   func(Opt) any       // o as a distsync.Option
	unwrapOpt func(any) Opt       // the Opt of a distsync.Option
)

// Bridge installs the conversions; only package distsync calls it.
func Bridge(of func(h any) *Handle, wrap func(l *Lease) any, wrapO func(Opt) any, unwrapO func(any) Opt) {
	handleOf, wrapLease, wrapOpt, unwrapOpt = of, wrap, wrapO, unwrapO
}

// Of returns the core of a *distsync.Handle (nil for a nil handle).
func Of(h any) *Handle { return handleOf(h) }

// Public returns the *distsync.Lease that wraps l (internal/api asserts its type), made on
// the first call (none in the core's own tests, which run without package distsync).
func (l *Lease) Public() any {
	l.endMu.Lock()
	defer l.endMu.Unlock()
	if l.pub == nil && wrapLease != nil {
		l.pub = wrapLease(l)
	}
	return l.pub
}

// WrapOption returns o as a distsync.Option (internal/api asserts its type).
func WrapOption(o Opt) any { return wrapOpt(o) }

// Unwrap returns the Opts of opts, each a distsync.Option.
func Unwrap[O any](opts []O) []Opt {
	out := make([]Opt, len(opts))
	for i, o := range opts {
		out[i] = unwrapOpt(o)
	}
	return out
}
