package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tagalloc/tagalloc/reporter"
)

// server serves a live view of reports taken by snap: Prometheus metrics,
// pprof heap profiles (when the report has stacks), the report as JSON,
// per-tag history, and a page that draws it.
type server struct {
	snap    func() (*reporter.Report, error)
	mu      sync.Mutex
	history []historyPoint // the newest last, at most historyMax
	latest  *liveView      // the newest sample's view, for the page
}

type historyPoint struct {
	T    int64             `json:"t"`    // unix milliseconds
	Live map[string]uint64 `json:"live"` // "pid/tag" -> live bytes (exact)
	// Libraries: "pid/library" -> live bytes estimated from the sampled
	// stacks; absent when no process has stacks.
	Libraries map[string]uint64 `json:"libraries,omitempty"`
	// Resident: "pid" -> resident bytes (VmRSS) of each process running
	// and readable then; absent when none is.
	Resident map[string]uint64 `json:"resident,omitempty"`
}

const historyMax = 3600

func (s *server) sample() {
	rep, err := s.snap()
	if err != nil {
		return
	}
	now := time.Now()
	pt := historyPoint{T: now.UnixMilli(), Live: map[string]uint64{}}
	for _, p := range rep.Processes {
		for _, t := range p.Tags {
			pt.Live[strconv.Itoa(p.PID)+"/"+t.Name] += t.LiveBytes
		}
		if r := p.Resident; r != nil && r.Measured == reporter.ResidentRunning && r.RSSBytes != nil {
			if pt.Resident == nil {
				pt.Resident = map[string]uint64{}
			}
			pt.Resident[strconv.Itoa(p.PID)] = *r.RSSBytes
		}
		if p.Stacks != nil {
			if pt.Libraries == nil {
				pt.Libraries = map[string]uint64{}
			}
			for _, l := range p.Stacks.Libraries {
				pt.Libraries[strconv.Itoa(p.PID)+"/"+l.Name] += l.LiveBytes
			}
		}
	}
	view := newLiveView(rep, now)
	s.mu.Lock()
	s.latest = view
	s.history = append(s.history, pt)
	if len(s.history) > historyMax {
		s.history = s.history[len(s.history)-historyMax:]
	}
	s.mu.Unlock()
}

func (s *server) handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	s.pprofRoutes(mux)
	mux.HandleFunc("/api/report", func(w http.ResponseWriter, r *http.Request) {
		rep, err := s.snap()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = rep.WriteJSON(w)
	})
	mux.HandleFunc("/api/history", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := append([]historyPoint(nil), s.history...)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(h)
	})
	mux.HandleFunc("/api/live", s.serveLive)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		servePage(w)
	})
	return mux
}

// serve listens on addr and serves until stop is closed (or the listener
// fails), sampling the history every interval.
func (s *server) serve(addr string, interval time.Duration, stop <-chan struct{}, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		s.sample()
		for {
			select {
			case <-stop:
				srv.Close()
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveCmd: tagalloc serve [--addr A] [--interval D] PID — a running
// process's tags, live (its books, as snapshot reads them).
func serveCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("serve")
	addr := fs.String("addr", "127.0.0.1:6060", "listen on `ADDRESS` (loopback unless told otherwise; port 0: any free port)")
	interval := fs.Duration("interval", time.Second, "`DURATION` between the history's samples")
	pos, err := parseN(fs, args, stdout, 1)
	if err == nil && *interval <= 0 {
		err = usagef("serve", "--interval %v: a duration above zero", *interval)
	}
	var pid int
	if err == nil {
		pid, err = pidArgument("serve", pos[0])
	}
	if err != nil {
		return usageExit(err)
	}
	if _, err := readOwnProcess(pid, "serve"); err != nil {
		return 1, fmt.Errorf("serve: %w", err)
	}
	s := &server{snap: func() (*reporter.Report, error) {
		snap, err := readOwnProcess(pid, "serve")
		if err != nil {
			return nil, err
		}
		p := reporter.FromSnapshot(snap)
		p.Resident = residentNow(pid, snap.StartNS)
		return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}, nil
	}}
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() { <-sigs; close(stop) }()
	err = s.serve(*addr, *interval, stop, func(a net.Addr) {
		fmt.Fprintf(stdout, "tagalloc: serving process %d on http://%s/ (metrics: /metrics)\n", pid, a)
	})
	if err != nil {
		return 1, fmt.Errorf("serve: %w", err)
	}
	return 0, nil
}
