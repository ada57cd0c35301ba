// Options: one table, read from the environment once, at first use.

package alloc

import (
	"os"
	"strconv"
	"time"
)

// option is one setting: its environment variable, default and meaning.
type option struct {
	env, def, doc string
}

var optionTable = []option{
	{"TAGALLOC_GO_DEBUG", "0", "1: exact double-free detection (a bitmap of blocks in use), freed blocks poisoned and checked on reuse"},
	{"TAGALLOC_PURGE_DELAY_MS", "500", "free memory stays resident this long before it is returned to the OS (as the native library)"},
}

// env reads an option's value (its default if unset or unparsable).
func envInt(name string) int64 {
	for _, o := range optionTable {
		if o.env != name {
			continue
		}
		if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v >= 0 {
			return v
		}
		v, _ := strconv.ParseInt(o.def, 10, 64)
		return v
	}
	panic("alloc: unknown option " + name)
}

func purgeDelay() time.Duration {
	return time.Duration(max(envInt("TAGALLOC_PURGE_DELAY_MS"), 1)) * time.Millisecond
}
