//go:build !linux

package main

import "os"

// childrenMaySwitchUser: root may.
func childrenMaySwitchUser() bool { return os.Geteuid() == 0 }

// noExec: not known off Linux.
func noExec(dir string) bool { return false }

// memBase: no memory filesystem is looked for off Linux.
func memBase() string { return "" }

// lockDir: no lock off Linux (nothing is put on a memory filesystem).
func lockDir(dir string) *os.File { return nil }

// sweepMemBase: nothing to sweep off Linux.
func sweepMemBase(base string) {}
