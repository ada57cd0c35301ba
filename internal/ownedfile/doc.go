// Package ownedfile opens a file that a target process owns (its books
// or events file in a run's books directory) without trusting what is
// at the name: that is its one job. Linux only; elsewhere callers open
// the file plainly.
package ownedfile
