//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly

package main

// termiosGet: no terminal test here; isTerminal says no.
const termiosGet = 0
