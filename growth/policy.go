package growth

import "github.com/tagalloc/tagalloc/sizeclass"

// Policy gives the capacity to grow to when a buffer of capacity cap must
// hold need bytes (need > cap).
type Policy func(cap, need int) int

// JustEnough grows to exactly what is needed: every append past the
// capacity reallocates and copies everything, so n one-byte appends copy
// about n²/2 bytes.
func JustEnough(cap, need int) int { return need }

// RoundUp grows to need rounded up to a multiple of granule (a page,
// say): a linear policy, n/granule reallocations, still quadratic copying.
func RoundUp(granule int) Policy {
	return func(cap, need int) int { return (need + granule - 1) / granule * granule }
}

// Exponential grows by factor (2: doubling; Go's append uses 2 then
// about 1.25) with a first capacity of at least min: log(n) reallocations
// and at most about n/(factor-1) bytes copied in all.
func Exponential(factor float64, min int) Policy {
	return func(cap, need int) int {
		c := int(float64(cap) * factor)
		if c < min {
			c = min
		}
		if c < need {
			c = need
		}
		return c
	}
}

// SizeClass grows to the size the allocator hands out anyway for need
// (tagalloc's size classes up to 512 KiB, whole 64 KiB pages above, 4 KiB
// pages from 32 MiB): growing within it is free, so a buffer should use
// it all before it reallocates.
func SizeClass(cap, need int) int { return Usable(need) }

// Usable is the usable size of a block of n bytes in the allocator.
func Usable(n int) int {
	switch {
	case n <= 0:
		return int(sizeclass.Classes[0].Size)
	case n <= sizeclass.MaxSmall:
		return int(sizeclass.Classes[sizeclass.ClassOf(uint32(n))].Size)
	case n < 32<<20:
		return (n + sizeclass.PageSize - 1) &^ (sizeclass.PageSize - 1)
	default:
		return (n + 4095) &^ 4095
	}
}
