package scripts

// The KEYS and ARGV of a once group's scripts, a fenced value's, and inspect.lua (see
// seam.go).

// OnceBeginArgs are once_begin.lua's KEYS and ARGV, in its header's order. Its optional
// KEYS[7] and ARGV[4] are sent if Last is set.
type OnceBeginArgs struct {
	Lead     string `key:"lead"`
	Kept     string `key:"kept"`
	Res      string `key:"res"`
	Mine     string `key:"mine"`
	Fence    string `key:"fence"`
	Forgot   string `key:"forgot"`
	Last     string `key:"last,opt"`
	Owner    string `arg:"owner"`
	TTL      string `arg:"ttl"`
	FenceTTL string `arg:"fence_ttl"`
	Floor    string `arg:"floor,opt"`
}

// OnceFinishArgs are once_finish.lua's KEYS and ARGV, in its header's order (by index: the
// header names KEYS[3] last). Its optional KEYS[5] is sent if Last is set.
type OnceFinishArgs struct {
	Lead    string `key:"lead"`
	Kept    string `key:"kept"`
	Res     string `key:"res"`
	Forgot  string `key:"forgot"`
	Last    string `key:"last,opt"`
	Owner   string `arg:"owner"`
	Result  string `arg:"result"`
	Keep    string `arg:"keep"`
	Linger  string `arg:"linger"`
	Channel string `arg:"channel"`
	Pub     string `arg:"pub"`
	Token   string `arg:"token"`
}

// OnceForgetArgs are once_forget.lua's KEYS and ARGV, in its header's order.
type OnceForgetArgs struct {
	Lead    string `key:"lead"`
	Kept    string `key:"kept"`
	Forgot  string `key:"forgot"`
	Linger  string `arg:"linger"`
	Channel string `arg:"channel"`
	Pub     string `arg:"pub"`
}

// FencedSetArgs are fenced_set.lua's KEYS and ARGV, in its header's order.
type FencedSetArgs struct {
	Key   string `key:"value"` // the hash that keeps the value and its token
	Token string `arg:"token"`
	Value string `arg:"value"`
}

// FencedDeleteArgs are fenced_delete.lua's KEYS and ARGV, in its header's order.
type FencedDeleteArgs struct {
	Key   string `key:"value"` // the hash, as in FencedSetArgs
	Token string `arg:"token"`
	Keep  string `arg:"keep"`
}
