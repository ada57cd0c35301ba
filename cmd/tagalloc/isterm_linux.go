package main

import "golang.org/x/sys/unix"

// termiosGet reads a terminal's settings (isTerminal).
const termiosGet = unix.TCGETS
