package main

import (
	"slices"
	"time"
)

// median returns the middle value (the mean of the two middle ones for an
// even count); 0 for none.
func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quartiles returns the 25th and 75th percentiles (nearest rank).
func quartiles(x []float64) (float64, float64) {
	if len(x) == 0 {
		return 0, 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/4], s[(3*len(s))/4]
}

func medianDuration(x []time.Duration) time.Duration {
	f := make([]float64, len(x))
	for i, d := range x {
		f[i] = float64(d)
	}
	return time.Duration(median(f))
}
