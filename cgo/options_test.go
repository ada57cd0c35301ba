package cgo

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/internal/layout"
	"github.com/tagalloc/tagalloc/internal/size"
)

// The library reads a TAGALLOC_ size as the Go commands do: each case of
// internal/size's list is taken at the value it lists or refused with a
// warning (TAGALLOC_VERBOSE=1 prints the options in effect).
func TestOptionSizes(t *testing.T) {
	cases, err := size.Cases()
	require.NoError(t, err)
	l := lib(t)
	for _, c := range cases {
		r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + l, "TAGALLOC_VERBOSE=1", "TAGALLOC_PURGE_DELAY_MS=" + c.In}, "/bin/echo") // echo allocates: the library starts
		require.NoError(t, r.err, "%q: %s", c.In, r.stderr)
		refused := strings.Contains(r.stderr, "ignoring TAGALLOC_PURGE_DELAY_MS=")
		if c.Bad {
			require.True(t, refused, "%q taken: %s", c.In, r.stderr)
			require.Contains(t, r.stderr, "tagalloc: TAGALLOC_PURGE_DELAY_MS=200\n", "%q: the default stays", c.In)
			continue
		}
		require.False(t, refused, "%q refused: %s", c.In, r.stderr)
		require.Contains(t, r.stderr, fmt.Sprintf("tagalloc: TAGALLOC_PURGE_DELAY_MS=%d\n", c.Want), c.In)
	}
}

// TAGALLOC_VERBOSE names the options of the build it runs in, not those
// only another build reads (the checking build's, the stacks build's).
func TestVerboseNamesThisBuildsOptions(t *testing.T) {
	builds := []struct {
		name       string
		lib        string
		has, hasnt []string
	}{
		{"plain", lib(t), nil, []string{"TAGALLOC_CHECK=", "TAGALLOC_CHECK_QUARANTINE=", "TAGALLOC_SAMPLE_RATE=", "TAGALLOC_UNWIND="}},
		{"checking", checkLib(t), []string{"TAGALLOC_CHECK=7\n", "TAGALLOC_CHECK_QUARANTINE="}, []string{"TAGALLOC_SAMPLE_RATE="}},
		{"stacks", strictLib(t, "sampling", SamplingFlags...), []string{"TAGALLOC_SAMPLE_RATE=524288\n", "TAGALLOC_UNWIND="}, []string{"TAGALLOC_CHECK="}},
	}
	for _, b := range builds {
		r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + b.lib, "TAGALLOC_VERBOSE=1"}, "/bin/echo")
		require.NoError(t, r.err, "%s: %s", b.name, r.stderr)
		require.Contains(t, r.stderr, "tagalloc: TAGALLOC_PURGE_DELAY_MS=200\n", b.name)
		for _, s := range b.has {
			require.Contains(t, r.stderr, "tagalloc: "+s, b.name)
		}
		for _, s := range b.hasnt {
			require.NotContains(t, r.stderr, "tagalloc: "+s, b.name)
		}
	}
}

// An option that only another build reads, set for this one, is named in
// a warning, not taken silently.
func TestOptionOfAnotherBuildWarns(t *testing.T) {
	r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_SAMPLE_RATE=1M", "TAGALLOC_CHECK_QUARANTINE=1M"}, "/bin/echo")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stderr, "TAGALLOC_SAMPLE_RATE: this build of the library has no stacks (tagalloc run --stacks builds one)")
	require.Contains(t, r.stderr, "TAGALLOC_CHECK_QUARANTINE: this build of the library has no checks (tagalloc run --check builds one)")
	r = runProg(t, time.Minute, []string{"LD_PRELOAD=" + strictLib(t, "sampling", SamplingFlags...), "TAGALLOC_SAMPLE_RATE=1M"}, "/bin/echo")
	require.NoError(t, r.err, r.stderr)
	require.NotContains(t, r.stderr, "TAGALLOC_SAMPLE_RATE")
}

// The library takes its options from internal/layout's table: under
// TAGALLOC_VERBOSE=1 each build prints every size option it reads, at
// the default the table gives, and none it does not read.
func TestOptionsAsLayoutSays(t *testing.T) {
	builds := []struct {
		lib  string
		here layout.Build
	}{{lib(t), layout.BuildAll}, {checkLib(t), layout.BuildCheck}, {strictLib(t, "sampling", SamplingFlags...), layout.BuildStacks}}
	for _, b := range builds {
		r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + b.lib, "TAGALLOC_VERBOSE=1"}, "/bin/echo")
		require.NoError(t, r.err, "%s build: %s", b.here, r.stderr)
		for _, o := range layout.Options {
			if o.Field == "" {
				continue
			}
			line := fmt.Sprintf("tagalloc: %s=%d\n", o.Name, o.Value)
			if o.Name == "TAGALLOC_VERBOSE" {
				line = "tagalloc: TAGALLOC_VERBOSE=1\n"
			}
			if o.Builds == layout.BuildAll || o.Builds == b.here {
				require.Contains(t, r.stderr, line, "%s build", b.here)
			} else {
				require.NotContains(t, r.stderr, "tagalloc: "+o.Name+"=", "%s build", b.here)
			}
		}
	}
}
