//go:build !cgo

package tagcgo

// Without cgo there is no C code to tag: the library is never loaded.
const loaded = false

func enter(string) int { panic("tagcgo: built without cgo") }

func leave() {}

func stats(string) (TagStats, bool) { return TagStats{}, false }
