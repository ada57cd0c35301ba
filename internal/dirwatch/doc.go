// Package dirwatch reports the files made in a directory (or moved into
// it) whose names end in a suffix: that is its one job. On Linux it is
// an inotify watch; elsewhere there is none (Creates returns nil) and the
// caller reads the directory itself. The drainer (package drain) watches
// for events files, the launcher's resident poller for books files.
package dirwatch
