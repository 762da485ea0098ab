package main

import (
	"fmt"
	"time"
)

// durationFlag is a duration flag's value and the range that makes sense
// for it; max 0 means no upper bound.
type durationFlag struct {
	name     string
	value    time.Duration
	min, max time.Duration
}

// checkDurations refuses, before anything touches the kernel, a duration
// flag outside its range: a negative age, a watch too short to scan once,
// an interval that would busy-loop.
func checkDurations(flags ...durationFlag) error {
	for _, f := range flags {
		if f.value < f.min || (f.max > 0 && f.value > f.max) {
			want := fmt.Sprintf("at least %s", f.min)
			if f.max > 0 {
				want = fmt.Sprintf("from %s to %s", f.min, f.max)
			}
			return fmt.Errorf("--%s %s: want a duration %s", f.name, f.value, want)
		}
	}
	return nil
}
