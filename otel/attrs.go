package distsyncotel

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/distsync/distsync"
	"github.com/distsync/distsync/internal/kind"
)

// The results of a call that acquires (distsync.result).
const (
	resultAcquired = iota
	resultBusy
	resultShared
	resultCanceled
	resultTimeout
	resultClosed
	resultError
	nResults
)

var results = [nResults]string{"acquired", "busy", "shared", "canceled", "timeout", "closed", "error"}

// resultOf returns how e, an EventNotAcquired, ended.
func resultOf(e distsync.Event) int {
	switch {
	case e.Err == nil && strings.HasPrefix(e.Primitive, kind.OncePrefix):
		return resultShared // another leader's result
	case e.Err == nil:
		return resultBusy
	case errors.Is(e.Err, context.Canceled):
		return resultCanceled
	case errors.Is(e.Err, context.DeadlineExceeded):
		return resultTimeout
	case errors.Is(e.Err, distsync.ErrClosed):
		return resultClosed
	}
	return resultError
}

// The ends of a hold (distsync.end).
const (
	endReleased = iota
	endLost
	endClosed
	nEnds
)

var ends = [nEnds]string{"released", "lost", "closed"}

// The reasons of a loss (distsync.reason).
const (
	reasonExpiredOrTaken = iota
	reasonDeadline
	reasonReleaseUnconfirmed
	reasonQuorum
	reasonOther
	nReasons
)

var reasons = [nReasons]string{"expired_or_taken", "deadline", "release_unconfirmed", "quorum", "other"}

// lossTexts tells the reason of a loss by what its error says: package distsync words each
// loss's cause after ErrLost's text, and has no error value per cause. A loss worded
// otherwise is "other"; the tests pin the words of the losses they can cause.
var lossTexts = []struct {
	text   string
	reason int
}{
	{"gone or held by another owner", reasonExpiredOrTaken}, // renewed, refreshed
	{"expired or been taken", reasonExpiredOrTaken},         // released
	{"deadline passed", reasonDeadline},
	{"release could not be confirmed", reasonReleaseUnconfirmed},
	{"fewer than the quorum", reasonQuorum},
}

func reasonOf(err error) int {
	if err == nil {
		return reasonOther
	}
	msg := err.Error()
	for _, t := range lossTexts {
		if strings.Contains(msg, t.text) {
			return t.reason
		}
	}
	return reasonOther
}

// The roles of a once call (distsync.once.role).
const (
	roleLeader = iota
	roleFollower
	roleTakeover
	nRoles
)

var roles = [nRoles]string{"leader", "follower", "takeover"}

// roleOf returns the role that k, a once event, reports.
func roleOf(k distsync.EventKind) int {
	switch k {
	case distsync.EventOnceFollower:
		return roleFollower
	case distsync.EventOnceTakeover:
		return roleTakeover
	}
	return roleLeader
}

// Attribute keys.
const (
	keyPrimitive = attribute.Key("distsync.primitive")
	keyName      = attribute.Key("distsync.name")
	keyIdentity  = attribute.Key("distsync.identity")
	keyResult    = attribute.Key("distsync.result")
	keyEnd       = attribute.Key("distsync.end")
	keyReason    = attribute.Key("distsync.reason")
	keyRole      = attribute.Key("distsync.once.role")
	keyToken     = attribute.Key("distsync.token")
	keyWeight    = attribute.Key("distsync.weight")
	keyShared    = attribute.Key("distsync.shared")
	keyErrorType = attribute.Key("error.type")
)

// attrSets are the metrics' attributes for one primitive (and name), each made once, when
// first needed: building an attribute set copies and sorts it, which an event should not pay
// for.
type attrSets struct {
	kv    []attribute.KeyValue // distsync.primitive, distsync.name and distsync.identity (unless left out)
	base  opts
	extra [nExtras]atomic.Pointer[opts] // base with extras[i]
}

// The indexes of extras: every value of distsync.result, distsync.end, distsync.reason,
// distsync.once.role and distsync.rate.decision.
const (
	resultExtras   = 0
	endExtras      = resultExtras + nResults
	reasonExtras   = endExtras + nEnds
	roleExtras     = reasonExtras + nReasons
	decisionExtras = roleExtras + nRoles
	nExtras        = decisionExtras + nDecisions
)

var extras = func() (kv [nExtras]attribute.KeyValue) {
	for i, v := range results {
		kv[resultExtras+i] = keyResult.String(v)
	}
	for i, v := range ends {
		kv[endExtras+i] = keyEnd.String(v)
	}
	for i, v := range reasons {
		kv[reasonExtras+i] = keyReason.String(v)
	}
	for i, v := range roles {
		kv[roleExtras+i] = keyRole.String(v)
	}
	for i, v := range decisions {
		kv[decisionExtras+i] = keyDecision.String(v)
	}
	return kv
}()

func (s *attrSets) result(r int) opts   { return s.with(resultExtras + r) }
func (s *attrSets) end(e int) opts      { return s.with(endExtras + e) }
func (s *attrSets) reason(r int) opts   { return s.with(reasonExtras + r) }
func (s *attrSets) role(r int) opts     { return s.with(roleExtras + r) }
func (s *attrSets) decision(d int) opts { return s.with(decisionExtras + d) }

// with returns the attributes of s with extras[i]. Two events may both make them the first
// time: the same set, so either is kept.
func (s *attrSets) with(i int) opts {
	if o := s.extra[i].Load(); o != nil {
		return *o
	}
	o := newOpts(append(s.kv[:len(s.kv):len(s.kv)], extras[i])...)
	s.extra[i].Store(&o)
	return o
}

// opts is one attribute set as the options of Add and of Record: made once, so that a
// measurement does not allocate its variadic slice.
type opts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func newOpts(kv ...attribute.KeyValue) opts {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return opts{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

type attrKey struct{ primitive, name, identity string }

// maxAttrSets bounds the attribute sets kept: the SDK's default cardinality limit, past which
// it folds new series into one overflow series anyway. Past it, the sets of a new primitive
// or name are made for each event.
const maxAttrSets = 2000

// sets returns the attribute sets of e's primitive (and name, unless WithoutNames; and
// identity, unless WithoutIdentity).
func (o *observer) sets(e distsync.Event) *attrSets {
	k := attrKey{primitive: e.Primitive}
	if o.names {
		k.name = e.Name
	}
	if o.identity {
		k.identity = e.Identity
	}
	if s, ok := o.attrs.Load(k); ok {
		return s.(*attrSets)
	}
	kv := []attribute.KeyValue{keyPrimitive.String(k.primitive)}
	if o.names {
		kv = append(kv, keyName.String(k.name))
	}
	if o.identity {
		kv = append(kv, keyIdentity.String(k.identity))
	}
	s := &attrSets{kv: kv, base: newOpts(kv...)}
	if o.nattrs.Load() < maxAttrSets {
		if prev, loaded := o.attrs.LoadOrStore(k, s); loaded {
			return prev.(*attrSets)
		}
		o.nattrs.Add(1) // racing stores may pass the bound by a few: it is a bound on memory
	}
	return s
}
