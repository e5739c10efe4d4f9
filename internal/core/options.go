package core

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Settings are what options set on one primitive: its handle's Config, overridden by the
// primitive's own options, and ext, the primitive package's own settings (see ExtOpt).
type Settings struct {
	Config
	ext any
}

// ExtOpt returns an option of a primitive package's own, which sets the package's settings
// of type E: set is called with the *E that the package's New gave Handle.Settings. kinds are
// the primitives it applies to.
func ExtOpt[E any](name string, kinds []string, set func(*E)) Opt {
	return Opt{Name: name, Kinds: kinds, Set: func(s *Settings) {
		if e, ok := s.ext.(*E); ok {
			set(e)
		}
	}}
}

// Opt is one option. Package distsync wraps it as a distsync.Option; primitive packages make
// theirs with WrapOption.
type Opt struct {
	Name   string   // the exported name, for errors: "WithLeaseTTL"
	Handle bool     // it applies to distsync.New
	Kinds  []string // the primitives it applies to (as in their errors: "mutex", "once.Group"); nil: every one
	Set    func(*Settings)
}

func (o Opt) appliesTo(kind string) bool {
	return o.Set != nil && (o.Kinds == nil || slices.Contains(o.Kinds, kind))
}

func (o Opt) where() string {
	var w []string
	if o.Handle {
		w = append(w, "distsync.New")
	}
	if o.Kinds == nil {
		w = append(w, "every primitive")
	}
	w = append(w, o.Kinds...)
	return strings.Join(w, ", ")
}

// Configure applies opts to the defaults of a Handle. Its errors match ErrInvalid.
func Configure(cfg Config, opts []Opt) (Config, error) {
	s := Settings{Config: cfg}
	for _, o := range opts {
		if !o.Handle || o.Set == nil {
			return cfg, fmt.Errorf("%w: %s does not apply to a Handle (it applies to %s)", ErrInvalid, o.name(), o.where())
		}
		o.Set(&s)
	}
	if err := s.check(); err != nil {
		return cfg, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.Config, nil
}

// Settings returns the settings of the primitive of kind called name, made from h with opts:
// ext is the package's own settings, with their defaults, for its options to change. Its
// errors (an option that does not apply to kind, a bad value) match ErrInvalid and name the
// primitive.
func (h *Handle) Settings(kind, name string, opts []Opt, ext any) (Settings, error) {
	s := Settings{Config: h.Config, ext: ext}
	for _, o := range opts {
		if !o.appliesTo(kind) {
			return s, fmt.Errorf("%s %q: %w: %s does not apply to a %s (it applies to %s)", kind, name, ErrInvalid, o.name(), kind, o.where())
		}
		o.Set(&s)
	}
	if err := s.check(); err != nil {
		return s, fmt.Errorf("%s %q: %w: %v", kind, name, ErrInvalid, err)
	}
	return s, nil
}

func (o Opt) name() string {
	if o.Name == "" {
		return "the zero Option"
	}
	return o.Name
}

// check validates the durations every primitive uses, and the handle's identity.
func (s *Settings) check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"lease TTL", s.LeaseTTL, MinLease}, {"waiter lease", s.WaiterLease, MinLease},
		{"fence retention", s.FenceTTL, time.Millisecond}, {"hand-off window", s.HandoffWindow, time.Millisecond},
	} {
		if d.v < d.min {
			return fmt.Errorf("%s must be at least %v, got %v", d.name, d.min, d.v)
		}
	}
	if err := checkIdentity(s.Identity); err != nil {
		return err
	}
	if a := s.ReplicaAck; a != (ReplicaAck{}) && (a.N < 1 || a.Timeout < time.Millisecond) {
		return fmt.Errorf("replica ack must ask for at least 1 replica within at least 1ms, got %d within %v", a.N, a.Timeout)
	}
	return nil
}
