//go:build !linux

package tagtable

import "errors"

// Events is a process's mapped events file (Linux only).
type Events struct{}

// OpenEvents needs Linux.
func OpenEvents(path string) (*Events, error) { return nil, errors.New("events files need Linux") }

// Close does nothing.
func (e *Events) Close() error { return nil }

// PID is 0.
func (e *Events) PID() int { return 0 }

// Mode is "sampled".
func (e *Events) Mode() string { return "sampled" }

// SampleRate is 1.
func (e *Events) SampleRate() uint64 { return 1 }

// Dropped is zero.
func (e *Events) Dropped() (events, bytes uint64) { return 0, 0 }

// Backlog is zero.
func (e *Events) Backlog() float64 { return 0 }

// Head is 0.
func (e *Events) Head() uint64 { return 0 }

// Size is 0.
func (e *Events) Size() uint64 { return 0 }

// Drain reads nothing.
func (e *Events) Drain(sink EventSink) (int, error) { return 0, nil }

// DrainTo reads nothing.
func (e *Events) DrainTo(sink EventSink, limit uint64) (int, error) { return 0, nil }

// ForkedFrom is (0, 0).
func (e *Events) ForkedFrom() (ppid int, seq uint64) { return 0, 0 }
