// Package growth is about buffers that grow: how a growth policy turns
// into reallocations and bytes copied (the model of "Please grow your
// buffers exponentially"), a growable buffer for Go users that follows a
// policy, and the diagnosis of realloc chains seen in a profile: per call
// site, whether the buffer grows just enough each time (and churns the
// heap, copying quadratically) or geometrically, with the fix spelled out.
package growth
