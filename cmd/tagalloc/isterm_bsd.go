//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package main

import "golang.org/x/sys/unix"

// termiosGet reads a terminal's settings (isTerminal).
const termiosGet = unix.TIOCGETA
