//go:build !linux || !(amd64 || arm64)

package bpf

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
)

// Tracer is not available on this platform: the probes are built for Linux
// on amd64 and arm64 only. Open always fails.
type Tracer struct{}

// Open returns an error wrapping errors.ErrUnsupported.
func Open(log *slog.Logger, opts Options) (*Tracer, error) {
	return nil, fmt.Errorf("bpf: open probes: %w", errors.ErrUnsupported)
}

// Mode reports ModeNone.
func (t *Tracer) Mode() Mode { return ModeNone }

// Probes reports nothing.
func (t *Tracer) Probes() []Probe { return nil }

// Stats reports nothing lost.
func (t *Tracer) Stats() (Stats, error) { return Stats{}, nil }

// StackStats reports nothing.
func (t *Tracer) StackStats() (StackStats, error) { return StackStats{}, nil }

// ResourceChanges tells nothing.
func (t *Tracer) ResourceChanges() (uint64, bool) { return 0, false }

// ProgramStats reports nothing.
func (t *Tracer) ProgramStats() ([]ProgramStat, error) { return nil, nil }

// Events yields nothing.
func (t *Tracer) Events(ctx context.Context) iter.Seq2[Event, error] {
	return func(func(Event, error) bool) {}
}

// AttachLibraries attaches nothing.
func (t *Tracer) AttachLibraries(pid uint32) (int, error) { return 0, nil }

// Sites reports nothing.
func (t *Tracer) Sites() Sites { return Sites{} }

// Backlog reports nothing waiting.
func (t *Tracer) Backlog() int { return 0 }

// Close does nothing.
func (t *Tracer) Close() error { return nil }
