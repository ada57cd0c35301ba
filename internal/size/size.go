package size

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// units are the suffixes a size may end with (upper-cased), and their
// shifts.
var units = map[string]uint{
	"": 0, "B": 0,
	"K": 10, "KB": 10, "KIB": 10,
	"M": 20, "MB": 20, "MIB": 20,
	"G": 30, "GB": 30, "GIB": 30,
}

// Parse reads s (surrounding spaces allowed) as a byte count of at most
// max bytes.
func Parse(s string, max uint64) (uint64, error) {
	t := strings.TrimSpace(s)
	digits := len(t) - len(strings.TrimLeft(t, "0123456789"))
	unit := t[digits:]
	shift, ok := units[strings.ToUpper(unit)]
	if strings.ContainsFunc(unit, func(r rune) bool { return r >= 0x80 }) { // ToUpper folds some of those into ASCII
		ok = false
	}
	v, err := strconv.ParseUint(t[:digits], 10, 64)
	if !ok || err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("size %q: want digits, then optionally K, M or G, such as 65536, 512K, 64MiB or 1G", s)
	}
	if err != nil || v > max>>shift {
		return 0, fmt.Errorf("size %q: more than %d bytes", s, max)
	}
	return v << shift, nil
}
