// pprof's own web UI (flame graph, top, graph, source) on a report's
// profile, through github.com/google/pprof/driver: report --web serves it
// for a saved report, serve and run --serve at /debug/pprof/ui/ for the
// running processes.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/pprof/driver"
	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"
)

// pprofUIOptions run pprof's driver on prof alone, as `pprof -http=hostport
// profile` would; serve receives the UI's handlers.
func pprofUIOptions(prof *profile.Profile, hostport string, browser bool, log io.Writer, serve func(*driver.HTTPServerArgs) error) *driver.Options {
	args := []string{"-http=" + hostport, "tagalloc"}
	if !browser {
		args = append([]string{"-no_browser"}, args...)
	}
	return &driver.Options{
		Flagset:    &pprofFlags{FlagSet: flag.NewFlagSet("pprof", flag.ContinueOnError), args: args},
		Fetch:      fetchProfile{prof},
		Sym:        noSymbolizer{},
		UI:         &pprofUI{log: log, browser: browser},
		HTTPServer: serve,
	}
}

// pprofHandlersMu: pprof's driver keeps state in package variables, so
// one UI is built at a time.
var pprofHandlersMu sync.Mutex

// pprofHandlers builds pprof's web UI for prof without serving it: its
// handlers by path ("/flamegraph", "/top", ...; links between them are
// relative, so they can be mounted under any prefix).
func pprofHandlers(prof *profile.Profile) (map[string]http.Handler, error) {
	pprofHandlersMu.Lock()
	defer pprofHandlersMu.Unlock()
	var handlers map[string]http.Handler
	var log strings.Builder
	err := driver.PProf(pprofUIOptions(prof, "127.0.0.1:1", false, &log, func(a *driver.HTTPServerArgs) error {
		handlers = a.Handlers
		return nil
	}))
	if err == nil && handlers == nil {
		err = errors.New(strings.TrimSpace(log.String()))
	}
	return handlers, err
}

// mountHandlers serves handlers (pprofHandlers) under prefix.
func mountHandlers(w http.ResponseWriter, r *http.Request, prefix string, handlers map[string]http.Handler) {
	path := "/" + strings.TrimPrefix(r.URL.Path, prefix)
	h, ok := handlers[path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = path
	h.ServeHTTP(w, r2)
}

// webReport serves pprof's web UI on prof at addr until interrupted,
// opening a browser when standard error is a terminal.
func webReport(prof *profile.Profile, addr string, stderr io.Writer) (int, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return exitFailure, fmt.Errorf("report: --web: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() { <-sigs; ln.Close() }()
	serve := func(a *driver.HTTPServerArgs) error {
		mux := http.NewServeMux()
		for path, h := range a.Handlers {
			mux.Handle(path, h)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
	if err := driver.PProf(pprofUIOptions(prof, ln.Addr().String(), isTerminal(stderr), stderr, serve)); err != nil {
		return exitFailure, fmt.Errorf("report: --web: %w", err)
	}
	return 0, nil
}

// isTerminal says whether w is a terminal (a file whose terminal
// settings can be read: isatty's test; termiosGet is the OS's request).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || termiosGet == 0 {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), termiosGet)
	return err == nil
}

// pprofFlags gives pprof's driver a fixed command line.
type pprofFlags struct {
	*flag.FlagSet
	args  []string
	extra string
}

func (f *pprofFlags) StringList(name, def, usage string) *[]*string {
	v := &stringList{}
	if def != "" {
		v.values = append(v.values, &def)
	}
	f.Var(v, name, usage)
	return &v.values
}

func (f *pprofFlags) ExtraUsage() string        { return f.extra }
func (f *pprofFlags) AddExtraUsage(more string) { f.extra += more }

func (f *pprofFlags) Parse(usage func()) []string {
	if err := f.FlagSet.Parse(f.args); err != nil {
		usage()
		return nil
	}
	return f.Args()
}

// stringList is a flag that may be given several times.
type stringList struct{ values []*string }

func (l *stringList) String() string { return "" }
func (l *stringList) Set(s string) error {
	l.values = append(l.values, &s)
	return nil
}

// fetchProfile hands pprof the profile, whatever source it names.
type fetchProfile struct{ prof *profile.Profile }

func (f fetchProfile) Fetch(string, time.Duration, time.Duration) (*profile.Profile, string, error) {
	return f.prof, "", nil
}

// noSymbolizer: the report's frames are named already; pprof is not to
// open binaries or ask a server.
type noSymbolizer struct{}

func (noSymbolizer) Symbolize(string, driver.MappingSources, *profile.Profile) error { return nil }

// pprofUI writes pprof's messages to log and reads no commands.
type pprofUI struct {
	log     io.Writer
	browser bool
}

func (u *pprofUI) ReadLine(string) (string, error) { return "", io.EOF }
func (u *pprofUI) Print(args ...any) {
	fmt.Fprintln(u.log, strings.TrimSuffix(fmt.Sprint(args...), "\n"))
}
func (u *pprofUI) PrintErr(args ...any)                { u.Print(args...) }
func (u *pprofUI) IsTerminal() bool                    { return false }
func (u *pprofUI) WantBrowser() bool                   { return u.browser }
func (u *pprofUI) SetAutoComplete(func(string) string) {}
