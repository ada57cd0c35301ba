// The redis workload: a server under the allocator, a client under glibc,
// both on the loopback interface only.

package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// redisTests are the commands redis-benchmark runs; its output must list
// each, in this order, for a run to count.
const redisTests = "set,get,lpush,lpop"

// runRedis starts redis-server (preloading preload) on a free loopback
// port, waits until it answers, runs redis-benchmark against it (args[0]
// requests per test), and shuts the server down. The time is the
// benchmark's wall time; the peak RSS and page faults are the server's; the
// server's CPU time is the metric server_cpu_s.
func runRedis(ctx context.Context, b *Built, w Workload, args []string, a Allocator, preload string) (Sample, error) {
	requests := "100000"
	if len(args) > 0 {
		requests = args[0]
	}
	server, err := findProgram(w.Program)
	if err != nil {
		return Sample{}, err
	}
	client, err := findProgram("/usr/bin/redis-benchmark")
	if err != nil {
		return Sample{}, err
	}
	port, err := freePort()
	if err != nil {
		return Sample{}, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	srv := a.command(ctx, server,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--protected-mode", "yes",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
		"--dir", os.TempDir())
	srv.Env = environ(os.Environ(), preload, w.Env)
	var srvOut bytes.Buffer
	srv.Stdout = &tail{max: 4096, buf: &srvOut}
	srv.Stderr = srv.Stdout
	if err := srv.Start(); err != nil {
		return Sample{}, fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Process.Kill()
			<-exited
		}
	}()

	if err := waitRedis(ctx, addr, exited); err != nil {
		stopped = true // waitRedis saw it exit, or the kill below reaps it
		_ = srv.Process.Kill()
		return Sample{}, fmt.Errorf("%w%s", err, stderrNote(srvOut.String()))
	}

	cl := exec.CommandContext(ctx, client, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-q",
		"-n", requests, "-r", "100000", "-d", "100", "-P", "16", "-t", redisTests)
	cl.Env = environ(os.Environ(), "", nil) // the client always uses glibc
	var clOut, clErr bytes.Buffer
	cl.Stdout, cl.Stderr = &clOut, &tail{max: 4096, buf: &clErr}
	start := time.Now()
	err = cl.Run()
	wall := time.Since(start).Seconds()
	if err != nil {
		return Sample{}, fmt.Errorf("redis-benchmark: %v%s", err, stderrNote(clErr.String()))
	}
	s, err := parseRedisBenchmark(clOut.String())
	if err != nil {
		return Sample{}, err
	}

	if err := redisCommand(addr, "SHUTDOWN NOSAVE"); err != nil {
		return Sample{}, fmt.Errorf("shutting redis-server down: %w", err)
	}
	select {
	case err = <-exited:
		stopped = true
	case <-time.After(10 * time.Second):
		return Sample{}, errors.New("redis-server did not exit within 10s of SHUTDOWN")
	}
	if err != nil {
		return Sample{}, fmt.Errorf("redis-server: %v%s", err, stderrNote(srvOut.String()))
	}
	s.Seconds = wall
	s.MaxRSS, s.Faults = usage(srv.ProcessState)
	s.SysSecs = sysSeconds(srv.ProcessState)
	s.Metrics["server_cpu_s"] = cpuSeconds(srv.ProcessState)
	return s, nil
}

// parseRedisBenchmark reads "-q" output ("SET: 952380.94 requests per
// second, p50=..."), with its carriage-return progress lines, into the list
// of tests as the output and their rates (kreq/s) as metrics.
func parseRedisBenchmark(out string) (Sample, error) {
	s := Sample{Metrics: map[string]float64{}}
	var names []string
	for _, line := range strings.FieldsFunc(out, func(r rune) bool { return r == '\r' || r == '\n' }) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || !strings.Contains(rest, "requests per second") {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return s, fmt.Errorf("redis-benchmark: bad line %q", line)
		}
		names = append(names, strings.ToLower(name))
		s.Metrics[strings.ToLower(name)+"_krps"] = v / 1000
	}
	s.Output = strings.Join(names, ",")
	if s.Output != redisTests {
		return s, fmt.Errorf("redis-benchmark ran %q, want %q; output: %s", s.Output, redisTests, clip(out, 300))
	}
	return s, nil
}

// waitRedis waits until the server at addr answers PING.
func waitRedis(ctx context.Context, addr string, exited <-chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited at start: %v", err)
		default:
		}
		if err := redisCommand(addr, "PING"); err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("redis-server did not answer PING within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// redisCommand sends one inline command and reads the first reply line.
// SHUTDOWN has no reply: the server closes the connection, which is fine.
func redisCommand(addr, command string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(command + "\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if strings.HasPrefix(command, "SHUTDOWN") {
		if strings.HasPrefix(line, "-") {
			return errors.New(strings.TrimSpace(line))
		}
		return nil
	}
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "-") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
