// Package stats holds the figures that the demo and the benchmark both report.
package stats

// Jain returns Jain's fairness index of shares: (Σx)² / (n·Σx²), 1 when every share is equal
// and 1/n when one share has everything. With no shares, or only zero ones, there is nothing
// to compare and it returns 0, so that a run in which nobody got anything does not read as
// fair.
func Jain(shares []float64) float64 {
	var sum, sq float64
	for _, x := range shares {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(shares)) * sq)
}
