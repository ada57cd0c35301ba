// Package procmem reads a process's resident memory as Linux reports it:
// VmRSS, VmHWM and RssAnon from /proc/PID/status, the private (unshared)
// resident bytes from /proc/PID/smaps_rollup (what Firefox's about:memory
// calls resident-unique), and the process's start time from
// /proc/PID/stat, which tells a process from a later one given its pid.
//
// Every figure is as the kernel reports it. A field a file lacks is nil,
// never 0: the caller shows it as unknown.
package procmem

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// ErrGone: the process has ended (no /proc entry, or a zombie whose memory
// is already released). Its resident figures can no longer be read.
var ErrGone = errors.New("the process has ended")

// Status is what /proc/PID/status says of a process's resident memory, in
// bytes; nil where the file has no such line.
type Status struct {
	RSS  *uint64 // VmRSS: resident now
	HWM  *uint64 // VmHWM: the highest VmRSS of the process's current program image (exec resets it)
	Anon *uint64 // RssAnon: the anonymous part of VmRSS
}

// ParseStatus reads the memory lines of a /proc/PID/status file. A process
// whose State is zombie (Z) or dead (X), or that has no VmRSS line while
// its State says it is a user process, has ended: ErrGone.
func ParseStatus(b []byte) (Status, error) {
	var s Status
	state := byte(0)
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		switch string(key) {
		case "State":
			if v := bytes.TrimSpace(val); len(v) > 0 {
				state = v[0]
			}
		case "VmRSS":
			s.RSS = kB(val)
		case "VmHWM":
			s.HWM = kB(val)
		case "RssAnon":
			s.Anon = kB(val)
		}
	}
	if state == 'Z' || state == 'X' {
		return Status{}, ErrGone
	}
	return s, nil
}

// kB parses a status value "   1234 kB" into bytes; nil if it is not one.
func kB(v []byte) *uint64 {
	f := bytes.Fields(v)
	if len(f) != 2 || string(f[1]) != "kB" {
		return nil
	}
	n, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil || n > 1<<53/1024 {
		return nil
	}
	n *= 1024
	return &n
}

// ParsePrivate sums the Private_Clean and Private_Dirty lines of a
// /proc/PID/smaps_rollup (or smaps) file, in bytes: the resident pages
// no other process maps, as Firefox's resident-unique counts them. Nil if
// the file has neither line.
func ParsePrivate(b []byte) *uint64 {
	var sum uint64
	found := false
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok || (string(key) != "Private_Clean" && string(key) != "Private_Dirty") {
			continue
		}
		v := kB(val)
		if v == nil {
			return nil
		}
		sum += *v
		found = true
	}
	if !found {
		return nil
	}
	return &sum
}

// ParseStartTicks returns field 22 of a /proc/PID/stat file: when the
// process started, in clock ticks since boot. The command name (field 2)
// is in parentheses and may hold spaces and ')': the fields are counted
// from the last ')'.
func ParseStartTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state), so field 22 is f[19]
	if len(f) < 20 {
		return 0, errors.New("stat: too few fields")
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// gone maps an error reading /proc/PID/FILE to ErrGone when the process
// is no more (ENOENT, ESRCH).
func gone(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return ErrGone
	}
	return err
}

// ReadStatus reads /proc/PID/status. A process without a VmRSS line is
// ErrGone: its memory was released, as an exiting process's is before it
// becomes a zombie (a reading then would replace the last one that had
// figures with one that has none; kernel threads have none either).
func ReadStatus(pid int) (Status, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Status{}, gone(err)
	}
	s, err := ParseStatus(b)
	if err == nil && s.RSS == nil {
		return Status{}, ErrGone
	}
	return s, err
}

// ReadPrivate reads the private resident bytes of /proc/PID/smaps_rollup
// (Linux 4.14 and later). It walks the process's page tables, so it
// costs about a millisecond for 300 MB resident: read it less often than
// the status.
func ReadPrivate(pid int) (*uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return nil, gone(err)
	}
	if len(b) == 0 {
		return nil, ErrGone // an exiting process's rollup is empty
	}
	v := ParsePrivate(b)
	if v == nil {
		return nil, errors.New("smaps_rollup has no Private_Clean or Private_Dirty line")
	}
	return v, nil
}

// ReadStartTicks reads when pid started (ParseStartTicks).
func ReadStartTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, gone(err)
	}
	return ParseStartTicks(b)
}

// ticksPerSecond is Linux's USER_HZ, the unit of /proc/PID/stat's times:
// 100 on every architecture Go supports.
const ticksPerSecond = 100

// BootTimeNS is when the system booted (the btime line of /proc/stat),
// in Unix nanoseconds; the kernel gives it to the second, rounded down.
var BootTimeNS = sync.OnceValues(func() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			s, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, err
			}
			return s * 1e9, nil
		}
	}
	return 0, errors.New("/proc/stat has no btime")
})

// StartNS turns a start time in ticks since boot into Unix nanoseconds;
// it may be up to a second early (btime is rounded down), never late by
// more than a tick.
func StartNS(ticks uint64) (uint64, error) {
	boot, err := BootTimeNS()
	if err != nil {
		return 0, err
	}
	return boot + ticks*(1e9/ticksPerSecond), nil
}
