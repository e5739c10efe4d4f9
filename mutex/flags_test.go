package mutex

import "testing"

// TestFlags checks the table behind flags against the characters it stands for.
func TestFlags(t *testing.T) {
	for i := range 8 {
		a, b, c := i&1 != 0, i&2 != 0, i&4 != 0
		if got, want := flags(a, b, c), flag(a)+flag(b)+flag(c); got != want {
			t.Errorf("flags(%v, %v, %v) = %q, want %q", a, b, c, got, want)
		}
	}
}
