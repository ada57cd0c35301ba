package growth

// Allocator gives a Buffer its memory: Go slices by default; package
// alloc's Malloc, Realloc and Free fit it too (off the Go heap, tagged).
type Allocator interface {
	Alloc(n int) []byte
	Realloc(b []byte, n int) []byte
	Free(b []byte)
}

type goSlices struct{}

func (goSlices) Alloc(n int) []byte { return make([]byte, n) }
func (goSlices) Realloc(b []byte, n int) []byte {
	nb := make([]byte, n)
	copy(nb, b)
	return nb
}
func (goSlices) Free([]byte) {}

// Buffer is an append-only byte buffer that grows by a policy and counts
// what growing cost. The zero value grows by doubling (from 64 bytes)
// with Go slices.
type Buffer struct {
	Policy    Policy    // nil: Exponential(2, 64)
	Allocator Allocator // nil: Go slices
	buf       []byte    // len is the capacity; n the bytes in use
	n         int
	reallocs  int
	copied    int64
}

func (b *Buffer) grow(need int) {
	if need <= len(b.buf) {
		return
	}
	p := b.Policy
	if p == nil {
		p = Exponential(2, 64)
	}
	a := b.Allocator
	if a == nil {
		a = goSlices{}
	}
	nc := max(p(len(b.buf), need), need)
	if b.buf == nil {
		b.buf = a.Alloc(nc)
	} else {
		b.copied += int64(b.n)
		b.buf = a.Realloc(b.buf, nc)
	}
	b.reallocs++
}

// Grow makes room for n more bytes.
func (b *Buffer) Grow(n int) {
	if n < 0 {
		panic("growth: negative Grow")
	}
	b.grow(b.n + n)
}

// Append adds p.
func (b *Buffer) Append(p []byte) {
	b.grow(b.n + len(p))
	b.n += copy(b.buf[b.n:], p)
}

// Bytes is the content (valid until the next Append or Grow).
func (b *Buffer) Bytes() []byte { return b.buf[:b.n] }

// Len is the bytes in use; Cap the capacity.
func (b *Buffer) Len() int { return b.n }

// Cap is the capacity.
func (b *Buffer) Cap() int { return len(b.buf) }

// Reset empties the buffer and keeps its memory.
func (b *Buffer) Reset() { b.n = 0 }

// Free gives the memory back to the allocator.
func (b *Buffer) Free() {
	if b.buf != nil {
		a := b.Allocator
		if a == nil {
			a = goSlices{}
		}
		a.Free(b.buf)
	}
	b.buf, b.n = nil, 0
}

// Reallocs is how many times the buffer got new memory; BytesCopied what
// moving cost.
func (b *Buffer) Reallocs() int { return b.reallocs }

// BytesCopied is the bytes copied from old memory into new.
func (b *Buffer) BytesCopied() int64 { return b.copied }
