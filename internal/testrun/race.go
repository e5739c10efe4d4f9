//go:build race

package testrun

import "runtime"

const raceEnabled = true

// raceErrors returns how many races the race detector reported.
func raceErrors() int { return runtime.RaceErrors() }
