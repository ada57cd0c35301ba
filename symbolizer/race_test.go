//go:build race

package symbolizer

const raceEnabled = true
