package main

import "golang.org/x/sys/unix"

// childrenMaySwitchUser says whether a child of ours can become another
// user without a set-user-ID program: we may set user ids (root, or
// CAP_SETUID in our permitted set). A set-user-ID program runs in the
// loader's secure mode, which ignores LD_PRELOAD and removes it from the
// environment, so without that right no child of the run loads the
// library as another user.
func childrenMaySwitchUser() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return unix.Geteuid() == 0
	}
	return data[0].Permitted&(1<<unix.CAP_SETUID) != 0
}

// noExec says whether dir's filesystem is mounted noexec: the loader could
// not map a library from it.
func noExec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
