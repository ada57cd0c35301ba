package procmem

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func u(v uint64) *uint64 { return &v }

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Status
		err  error
	}{
		{"running", "Name:\tpython3\nState:\tS (sleeping)\nVmPeak:\t  30000 kB\nVmHWM:\t   12000 kB\nVmRSS:\t   11000 kB\nRssAnon:\t    6000 kB\nRssFile:\t 5000 kB\n",
			Status{RSS: u(11000 << 10), HWM: u(12000 << 10), Anon: u(6000 << 10)}, nil},
		{"no final newline", "State:\tR (running)\nVmRSS:\t 4 kB", Status{RSS: u(4096)}, nil},
		{"zombie", "Name:\tx\nState:\tZ (zombie)\n", Status{}, ErrGone},
		{"dead", "State:\tX (dead)\nVmRSS:\t 4 kB\n", Status{}, ErrGone},
		{"not kB", "State:\tS\nVmRSS:\t4 MB\nVmHWM:\tlots kB\nRssAnon:\t1 2 kB\n", Status{}, nil},
		{"too large", "VmRSS:\t99999999999999999999 kB\n", Status{}, nil},
		{"empty", "", Status{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStatus([]byte(tc.in))
			require.ErrorIs(t, err, tc.err)
			if tc.err == nil {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParsePrivate(t *testing.T) {
	rollup := "55f0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:  9000 kB\nPss:  5000 kB\nShared_Clean:  3000 kB\nPrivate_Clean:   1000 kB\nPrivate_Dirty:   4000 kB\nPrivate_Hugetlb:  0 kB\n"
	require.Equal(t, u(5000<<10), ParsePrivate([]byte(rollup)))
	require.Nil(t, ParsePrivate([]byte("Rss: 9000 kB\n")), "no Private lines: unknown, not 0")
	require.Nil(t, ParsePrivate([]byte("Private_Clean: x kB\nPrivate_Dirty: 1 kB\n")), "a line that is not a figure")
	require.Equal(t, u(0), ParsePrivate([]byte("Private_Clean: 0 kB\nPrivate_Dirty: 0 kB\n")), "0 read is 0")
}

func TestParseStartTicks(t *testing.T) {
	stat := func(comm string) []byte {
		return []byte("1234 (" + comm + ") S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 10000000 300 18446744073709551615\n")
	}
	for _, comm := range []string{"sh", "a b) S 9 9 (c", ") ) )", ""} {
		got, err := ParseStartTicks(stat(comm))
		require.NoError(t, err, "%q", comm)
		require.Equal(t, uint64(987654), got, "%q", comm)
	}
	_, err := ParseStartTicks([]byte("1234 (sh) S 1 2 3"))
	require.Error(t, err)
	_, err = ParseStartTicks([]byte("1234 sh S"))
	require.Error(t, err)
}

// The reads of a live process give figures; of a process that has ended,
// ErrGone; its start time is within a second or two of when it started.
func TestReadLive(t *testing.T) {
	before := time.Now()
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Start returns once the child exists, which may be before its exec of
	// sleep is done: the forked child's memory is not sleep's. Wait until
	// the exec has happened, so the reads below see one program.
	require.Eventually(t, func() bool {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	}, 10*time.Second, 5*time.Millisecond)

	s, err := ReadStatus(pid)
	require.NoError(t, err)
	require.NotNil(t, s.RSS)
	require.NotNil(t, s.HWM)
	require.NotNil(t, s.Anon)
	require.Greater(t, *s.RSS, uint64(0))
	require.GreaterOrEqual(t, *s.HWM, *s.RSS)
	if _, err := os.Stat("/proc/self/smaps_rollup"); err == nil {
		p, err := ReadPrivate(pid)
		require.NoError(t, err)
		require.NotNil(t, p)
		// The private read lies between two reads of RSS; it cannot exceed
		// the larger of them by more than the pages touched in between.
		s2, err := ReadStatus(pid)
		require.NoError(t, err)
		require.NotNil(t, s2.RSS)
		require.LessOrEqual(t, *p, max(*s.RSS, *s2.RSS)+64<<10)
	}
	ticks, err := ReadStartTicks(pid)
	require.NoError(t, err)
	ns, err := StartNS(ticks)
	require.NoError(t, err)
	started := time.Unix(0, int64(ns))
	require.WithinDuration(t, before, started, 2*time.Second)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	_, err = ReadStatus(pid)
	require.ErrorIs(t, err, ErrGone)
	_, err = ReadPrivate(pid)
	require.ErrorIs(t, err, ErrGone)
	_, err = ReadStartTicks(pid)
	require.ErrorIs(t, err, ErrGone)
}

// A zombie (ended, not yet reaped) has no memory to read: ErrGone.
func TestReadZombie(t *testing.T) {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	defer func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := ReadStatus(pid)
		if err != nil {
			require.ErrorIs(t, err, ErrGone)
			break
		}
		require.True(t, time.Now().Before(deadline), "true never ended")
		time.Sleep(time.Millisecond)
	}
}
