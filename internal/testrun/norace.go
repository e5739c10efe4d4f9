//go:build !race

package testrun

const raceEnabled = false

func raceErrors() int { return 0 }
