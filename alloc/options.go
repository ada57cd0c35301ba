// Options: one table, read from the environment once, at first use.

package alloc

import (
	"os"
	"strconv"
	"time"

	"github.com/tagalloc/tagalloc/internal/layout"
	"github.com/tagalloc/tagalloc/internal/size"
)

// option is one setting: its environment variable, default and meaning.
type option struct {
	env, def, doc string
}

// optionTable is alloc's own option and the three it shares with the
// native library, whose defaults come from the library's table
// (internal/layout, generated with cgo/src/shared.h): one default for
// both.
var optionTable = []option{
	{"TAGALLOC_GO_DEBUG", "0", "1: exact double-free detection (a bitmap of blocks in use), freed blocks poisoned and checked on reuse"},
	{"TAGALLOC_PURGE_DELAY_MS", layout.MustOption("TAGALLOC_PURGE_DELAY_MS").Default, "free memory stays resident at most this long before it is returned to the OS (as the native library)"},
	{"TAGALLOC_RETAIN_MIN", layout.MustOption("TAGALLOC_RETAIN_MIN").Default, "free memory always allowed to stay resident, the retain limit's floor (as the native library; K, M, G suffixes)"},
	{"TAGALLOC_HUGE_THRESHOLD", layout.MustOption("TAGALLOC_HUGE_THRESHOLD").Default, "blocks this large or larger get their own mapping (as the native library; K, M, G suffixes)"},
}

// optionNamed returns the table's entry for name.
func optionNamed(name string) option {
	for _, o := range optionTable {
		if o.env == name {
			return o
		}
	}
	panic("alloc: unknown option " + name)
}

// envInt reads an integer option (its default if unset or unparsable).
func envInt(name string) int64 {
	o := optionNamed(name)
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v >= 0 {
		return v
	}
	v, _ := strconv.ParseInt(o.def, 10, 64)
	return v
}

func purgeDelay() time.Duration {
	return time.Duration(max(envInt("TAGALLOC_PURGE_DELAY_MS"), 1)) * time.Millisecond
}

// envSize reads a size option in bytes, as the native library reads it
// (its default if unset or unreadable).
func envSize(name string) uintptr {
	o := optionNamed(name)
	if v, err := size.Parse(os.Getenv(o.env), 1<<40); err == nil && v > 0 {
		return uintptr(v)
	}
	v, _ := size.Parse(o.def, 1<<40)
	return uintptr(v)
}

// retainMin is TAGALLOC_RETAIN_MIN in bytes.
func retainMin() uintptr { return envSize("TAGALLOC_RETAIN_MIN") }

// hugeMin is TAGALLOC_HUGE_THRESHOLD in bytes.
func hugeMin() uintptr { return envSize("TAGALLOC_HUGE_THRESHOLD") }
