package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/internal/procmem"
	"github.com/tagalloc/tagalloc/reporter"
)

// startSleeper starts a process that runs until killed, and returns it
// with the Unix ns just before it started.
func startSleeper(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	before := uint64(time.Now().UnixNano())
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, before
}

// A running process read once: every figure known, as it is now.
func TestResidentNow(t *testing.T) {
	cmd, before := startSleeper(t)
	r := residentNow(cmd.Process.Pid, before)
	require.Equal(t, reporter.ResidentRunning, r.Measured, "%+v", r)
	require.NotNil(t, r.RSSBytes)
	require.NotNil(t, r.PeakRSSBytes)
	require.NotNil(t, r.AnonBytes)
	require.Greater(t, *r.RSSBytes, uint64(0))
	require.GreaterOrEqual(t, *r.PeakRSSBytes, *r.RSSBytes)
	require.LessOrEqual(t, *r.AnonBytes, *r.RSSBytes)
	if _, err := os.Stat("/proc/self/smaps_rollup"); err == nil {
		require.NotNil(t, r.UniqueBytes)
		require.LessOrEqual(t, *r.UniqueBytes, *r.RSSBytes+64<<10)
	}
	require.Zero(t, r.EndedByUnixMS)
	require.Equal(t, 1, r.Polls)
	require.Empty(t, r.Error)
	require.WithinDuration(t, time.Now(), time.UnixMilli(r.ReadAtUnixMS), 5*time.Second)

	// a process that has ended: nothing to read, every figure unknown
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	r = residentNow(cmd.Process.Pid, before)
	require.Equal(t, reporter.ResidentNever, r.Measured)
	require.Nil(t, r.RSSBytes)
	require.Nil(t, r.PeakRSSBytes)
	require.Nil(t, r.AnonBytes)
	require.Nil(t, r.UniqueBytes)
}

// Readings of another process than the books' are not reported as its:
// a process that started well after the books did (a later process
// given the pid), or a reading taken before the books began (the program
// the process ran before it exec'd).
func TestResidentRefusesOtherProcesses(t *testing.T) {
	cmd, before := startSleeper(t)
	pid := cmd.Process.Pid
	pl := newPolled()
	defer pl.end(time.Now())
	pl.read(pid, time.Now(), true)
	require.Equal(t, 1, pl.polls)

	r := pl.resident(before - 10e9) // books 10 s older than the process
	require.Equal(t, reporter.ResidentNever, r.Measured)
	require.Nil(t, r.RSSBytes)
	require.Contains(t, r.Error, "another process's")

	r = pl.resident(uint64(time.Now().Add(time.Second).UnixNano())) // books begun after the reading
	require.Equal(t, reporter.ResidentNever, r.Measured)
	require.Nil(t, r.RSSBytes)
	require.Contains(t, r.Error, "exec'd")

	r = pl.resident(before)
	require.Equal(t, reporter.ResidentRunning, r.Measured)
	require.NotNil(t, r.RSSBytes)
}

// A file that cannot be read leaves its figures unknown and says why;
// the figures read before stand.
func TestResidentUnreadable(t *testing.T) {
	pl := newPolled()
	pl.statusErr = "open /proc/1/status: permission denied"
	r := pl.resident(0)
	require.Equal(t, reporter.ResidentNever, r.Measured)
	require.Equal(t, "open /proc/1/status: permission denied", r.Error)
	require.Nil(t, r.RSSBytes)

	v := uint64(4096)
	pl = newPolled()
	pl.status, pl.at, pl.polls = procmem.Status{RSS: &v, HWM: &v}, time.Now(), 1
	pl.uniqueErr = "open /proc/1/smaps_rollup: permission denied"
	r = pl.resident(0)
	require.Equal(t, reporter.ResidentRunning, r.Measured)
	require.Equal(t, &v, r.RSSBytes)
	require.Nil(t, r.AnonBytes, "a line the status lacked is unknown, not 0")
	require.Nil(t, r.UniqueBytes)
	require.Contains(t, r.Error, "smaps_rollup")
}

// The poller finds a process by its books file, reads it while it runs,
// and once it has ended reports the last reading: when it was taken and
// by when the process had ended; a process it never read is unknown.
func TestResidentPoller(t *testing.T) {
	dir := t.TempDir()
	cmd, before := startSleeper(t)
	pid := cmd.Process.Pid
	require.NoError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(pid)+".tagalloc"), nil, 0o600))
	p := startResidentPoller(dir)
	defer p.finish()

	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		pl := p.procs[pid]
		polls := 0
		if pl != nil {
			polls = pl.polls
		}
		p.mu.Unlock()
		if polls >= 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the poller never read the process")
		time.Sleep(10 * time.Millisecond)
	}
	live := p.resident(pid, before)
	require.Equal(t, reporter.ResidentRunning, live.Measured, "running: read afresh")
	require.NotNil(t, live.RSSBytes)

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	reaped := time.Now()
	for {
		p.mu.Lock()
		gone := !p.procs[pid].goneAt.IsZero()
		p.mu.Unlock()
		if gone {
			break
		}
		require.True(t, time.Now().Before(deadline), "the poller never saw the process end")
		time.Sleep(10 * time.Millisecond)
	}
	p.finish()
	r := p.resident(pid, before)
	require.Equal(t, reporter.ResidentLastPoll, r.Measured, "%+v", r)
	require.NotNil(t, r.RSSBytes)
	require.NotNil(t, r.PeakRSSBytes)
	require.True(t, r.PeakIsBound())
	require.LessOrEqual(t, r.ReadAtUnixMS, reaped.UnixMilli())
	require.GreaterOrEqual(t, r.EndedByUnixMS, r.ReadAtUnixMS)
	require.Less(t, r.EndedByUnixMS-r.ReadAtUnixMS, int64(5000), "polled until near its end")
	require.GreaterOrEqual(t, r.Polls, 2)

	never := p.resident(pid+1_000_000, before)
	require.Equal(t, reporter.ResidentNever, never.Measured, "a process the poller never saw")
}

// exited notes the launched process's end when it is reaped: the
// reading before stands, ended by then.
func TestResidentPollerExited(t *testing.T) {
	dir := t.TempDir()
	cmd, before := startSleeper(t)
	pid := cmd.Process.Pid
	p := startResidentPoller(dir)
	defer p.finish()
	require.Equal(t, reporter.ResidentRunning, p.resident(pid, before).Measured, "a process the report names is read, books file or not")
	end := time.Now()
	p.exited(pid, end)
	r := p.resident(pid, before)
	require.Equal(t, reporter.ResidentLastPoll, r.Measured)
	require.Equal(t, end.UnixMilli(), r.EndedByUnixMS)
	require.NotNil(t, r.RSSBytes)
}

// tagalloc run records each process's resident memory: the launched
// process's last reading, when it was read and by when it had ended, in
// the JSON, the tree, and about:memory's resident measurements; a
// snapshot of a running process reads it as it runs.
func TestRunRecordsResident(t *testing.T) {
	prog := buildTagged(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "r.json")
	cmd := exec.Command(bin, "run", "-o", out, "--", prog, "wait")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	pid := ""
	for pid == "" && sc.Scan() {
		pid = readyPID(sc.Text())
	}
	require.NotEmpty(t, pid)

	snap, se, code := cli(t, "snapshot", pid)
	require.Equal(t, 0, code, se)
	var srep reporter.Report
	require.NoError(t, json.Unmarshal([]byte(snap), &srep))
	sr := srep.Processes[0].Resident
	require.NotNil(t, sr)
	require.Equal(t, reporter.ResidentRunning, sr.Measured)
	require.NotNil(t, sr.RSSBytes)
	tree, _, code := cli(t, "snapshot", "--format", "tree", pid)
	require.Equal(t, 0, code)
	require.Contains(t, tree, "-- resident (VmRSS, read while it ran)")
	require.Contains(t, tree, "-- resident-peak (VmHWM: the peak so far)")
	top, _, code := cli(t, "top", "-n", "1", pid)
	require.Equal(t, 0, code)
	require.Regexp(t, `blocks, resident [0-9.]+ [KMG]iB \(peak [0-9.]+ [KMG]iB\)`, top)

	time.Sleep(300 * time.Millisecond) // a few polls
	require.NoError(t, stdin.Close())
	for sc.Scan() {
	}
	err = cmd.Wait()
	require.Equal(t, 7, cmd.ProcessState.ExitCode(), "%v\n%s", err, stderr.String())

	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	p := rep.Processes[0]
	require.Equal(t, pid, strconv.Itoa(p.PID))
	r := p.Resident
	require.NotNil(t, r)
	require.Equal(t, reporter.ResidentLastPoll, r.Measured, "%+v", r)
	require.NotNil(t, r.RSSBytes)
	require.NotNil(t, r.PeakRSSBytes)
	require.NotNil(t, r.AnonBytes)
	require.GreaterOrEqual(t, *r.PeakRSSBytes, *r.RSSBytes)
	require.Greater(t, *r.RSSBytes, uint64(0))
	require.GreaterOrEqual(t, r.Polls, 2)
	require.GreaterOrEqual(t, r.EndedByUnixMS, r.ReadAtUnixMS)
	require.Less(t, r.EndedByUnixMS-r.ReadAtUnixMS, int64(2000))
	require.Contains(t, stderr.String(), "-- resident (VmRSS, last read ≤ ")
	require.Contains(t, stderr.String(), "-- resident-peak (VmHWM, a lower bound")

	mem, se, code := cli(t, "report", out, "--format", "about-memory")
	require.Equal(t, 0, code, se)
	f, err := reporter.ReadMemoryReport([]byte(mem))
	require.NoError(t, err)
	require.NoError(t, f.Check())
	found := map[string]reporter.MemReport{}
	for _, m := range f.Reports {
		if strings.HasSuffix(m.Process, "(pid "+pid+")") && strings.HasPrefix(m.Path, "resident") {
			found[m.Path] = m
		}
	}
	require.Equal(t, int64(*r.RSSBytes), found["resident"].Amount)
	require.Equal(t, int64(*r.PeakRSSBytes), found["resident-peak"].Amount)
	for _, m := range found {
		require.Equal(t, reporter.MemKindOther, m.Kind, m.Path)
		require.Equal(t, reporter.MemUnitsBytes, m.Units, m.Path)
	}
	if r.UniqueBytes != nil {
		require.Equal(t, int64(*r.UniqueBytes), found["resident-unique"].Amount)
	} else {
		require.NotContains(t, found, "resident-unique", "unknown: left out, not 0")
	}
}

// run --serve: the resident memory of each running process in /metrics
// and in /api/history.
func TestRunServeResident(t *testing.T) {
	prog := buildTagged(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, "run", "-q", "--stacks", "off", "--serve", "127.0.0.1:0", "--", prog, "wait")
	cmd.Dir = t.TempDir()
	addr := startServing(t, cmd)
	var metrics string
	for i := 0; i < 100 && !strings.Contains(metrics, "tagalloc_process_resident_bytes{"); i++ {
		time.Sleep(50 * time.Millisecond)
		metrics = string(get(t, addr+"/metrics"))
	}
	for _, m := range []string{"tagalloc_process_resident_bytes{", "tagalloc_process_resident_peak_bytes{", "tagalloc_process_resident_anon_bytes{"} {
		require.Contains(t, metrics, m)
	}
	var hist []historyPoint
	for i := 0; i < 100 && (len(hist) == 0 || len(hist[len(hist)-1].Resident) == 0); i++ {
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, json.Unmarshal(get(t, addr+"/api/history"), &hist))
	}
	require.NotEmpty(t, hist)
	for pid, rss := range hist[len(hist)-1].Resident {
		_, err := strconv.Atoi(pid)
		require.NoError(t, err, pid)
		require.Greater(t, rss, uint64(0))
	}
}

// Prometheus gets the resident figures of running processes that could
// be read: an unknown figure is no series (never 0), and an ended
// process's last reading is not what it holds now, so it is none either.
func TestResidentMetrics(t *testing.T) {
	v := func(n uint64) *uint64 { return &n }
	proc := func(pid int, r *reporter.Resident) reporter.Process {
		return reporter.Process{PID: pid, Command: []string{"prog"}, Tags: []reporter.Tag{}, Resident: r}
	}
	rep := &reporter.Report{Processes: []reporter.Process{
		proc(1, &reporter.Resident{Measured: reporter.ResidentRunning, RSSBytes: v(100), PeakRSSBytes: v(200), AnonBytes: v(50), UniqueBytes: v(0)}),
		proc(2, &reporter.Resident{Measured: reporter.ResidentRunning, RSSBytes: v(300)}),
		proc(3, &reporter.Resident{Measured: reporter.ResidentLastPoll, RSSBytes: v(400), PeakRSSBytes: v(400)}),
		proc(4, &reporter.Resident{Measured: reporter.ResidentNever}),
		proc(5, nil),
	}}
	ch := make(chan prometheus.Metric, 1000)
	collectReport(rep, ch)
	close(ch)
	got := map[string]float64{}
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		name := m.Desc().String()
		if !strings.Contains(name, "tagalloc_process_resident") {
			continue
		}
		fq := name[strings.Index(name, `"`)+1:]
		fq = fq[:strings.Index(fq, `"`)]
		pid := ""
		for _, l := range pb.GetLabel() {
			if l.GetName() == "pid" {
				pid = l.GetValue()
			}
		}
		got[fq+"/"+pid] = pb.GetGauge().GetValue()
	}
	require.Equal(t, map[string]float64{
		"tagalloc_process_resident_bytes/1":        100,
		"tagalloc_process_resident_peak_bytes/1":   200,
		"tagalloc_process_resident_anon_bytes/1":   50,
		"tagalloc_process_resident_unique_bytes/1": 0, // read as 0: a measurement
		"tagalloc_process_resident_bytes/2":        300,
	}, got)
}
