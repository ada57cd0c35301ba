//go:build !linux

package main

// procWatch: following processes needs Linux's /proc.
type procWatch struct{}

type progImage struct {
	pid       int
	uids      [3]int
	command   []string
	comm      string
	exe       string
	misses    int
	lib       bool
	private   bool
	loader    bool
	others    bool
	static    bool
	ownMalloc bool
	books     bool
	mapErr    error
	byExec    bool
}

func startProcWatch(pid int, books string) *procWatch { return &procWatch{} }

func (w *procWatch) stop() []*progImage { return nil }
