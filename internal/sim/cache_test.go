package sim

import (
	"slices"
	"testing"
)

func seq(start, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(start + i)
	}
	return ids
}

func TestPrefixCacheMatchesWholeBlocks(t *testing.T) {
	c := newPrefixCache(1 << 10)
	a := seq(0, 50) // 3 full blocks and 2 tokens
	if got := c.match(a); got != 0 {
		t.Fatalf("empty cache matched %d", got)
	}
	c.insert(a)
	tests := []struct {
		name string
		ids  []int32
		want int
	}{
		{"same", a, 48},
		{"exactly three blocks: the last token is computed", a[:48], 32},
		{"longer", seq(0, 100), 48},
		{"diverges in block 2", slices.Concat(a[:20], []int32{999}, a[21:]), 16},
		{"diverges in block 1", slices.Concat([]int32{999}, a[1:]), 0},
		{"same ids, shifted", seq(1, 50), 0},
	}
	for _, tt := range tests {
		if got := c.match(tt.ids); got != tt.want {
			t.Errorf("%s: match = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestPrefixCacheEvictsTailsFirst(t *testing.T) {
	c := newPrefixCache(4 * blockSize)
	a := seq(0, 3*blockSize+1)    // 3 blocks
	b := seq(1000, 2*blockSize+1) // 2 blocks
	c.insert(a)
	c.insert(b) // 5 blocks: evicts a's tail
	if got := c.usedTokens(); got != 4*blockSize {
		t.Fatalf("usedTokens = %d", got)
	}
	if got := c.match(a); got != 2*blockSize {
		t.Fatalf("a: match = %d, want its first 2 blocks", got)
	}
	if got := c.match(b); got != 2*blockSize {
		t.Fatalf("b: match = %d, want 2 blocks", got)
	}
	// b was used last; inserting a again evicts from a's old tail side and
	// then b's tail.
	c.insert(a)
	if got := c.match(a); got != 3*blockSize {
		t.Fatalf("a again: match = %d", got)
	}
	if got := c.match(b); got != blockSize {
		t.Fatalf("b after a: match = %d, want its head block", got)
	}
	// A prefix longer than the whole cache keeps its head.
	long := seq(5000, 10*blockSize+1)
	c.insert(long)
	if got := c.match(long); got != 4*blockSize {
		t.Fatalf("long: match = %d", got)
	}
	c.reset()
	if c.usedTokens() != 0 || c.match(long) != 0 {
		t.Fatal("reset left blocks")
	}
}

func TestNoCache(t *testing.T) {
	c := newPrefixCache(0)
	c.insert(seq(0, 100))
	if c.match(seq(0, 100)) != 0 || c.usedTokens() != 0 {
		t.Fatal("a zero-capacity cache holds blocks")
	}
}
