package sim

import "container/list"

// blockSize is the prefix cache's page size in tokens.
const blockSize = 16

// prefixCache is a paged prefix cache in the manner of vLLM's automatic
// prefix caching: a full block of blockSize token ids is identified by a hash
// of its parent block's hash and its own ids, so a block hash stands for the
// whole prefix up to it. Blocks are evicted least recently used first; within
// one prefix the tail is touched before the head, so tails go first and a
// cached prefix stays contiguous. Not safe for concurrent use.
type prefixCache struct {
	capBlocks int
	lru       *list.List               // of uint64 block hashes, most recent at the front
	index     map[uint64]*list.Element // block hash -> its element in lru
}

func newPrefixCache(capTokens int) *prefixCache {
	return &prefixCache{
		capBlocks: capTokens / blockSize,
		lru:       list.New(),
		index:     make(map[uint64]*list.Element),
	}
}

// blockHashes returns the chained hashes of the full blocks of ids.
func blockHashes(ids []int32) []uint64 {
	n := len(ids) / blockSize
	hs := make([]uint64, n)
	parent := uint64(0)
	for i := range n {
		h := hash64(fnvOffset).add(parent).ids(ids[i*blockSize : (i+1)*blockSize])
		parent = h.sum()
		hs[i] = parent
	}
	return hs
}

// match returns how many leading tokens of ids the cache holds, in whole
// blocks, and marks them used. As in SGLang at least the last token is always
// computed, so the match is at most len(ids)-1.
func (c *prefixCache) match(ids []int32) int {
	if len(ids) == 0 || c.capBlocks == 0 {
		return 0
	}
	hs := blockHashes(ids[:len(ids)-1])
	n := 0
	for n < len(hs) {
		if _, ok := c.index[hs[n]]; !ok {
			break
		}
		n++
	}
	c.touch(hs[:n])
	return n * blockSize
}

// insert adds the full blocks of ids, marks them used, and evicts least
// recently used blocks beyond the capacity.
func (c *prefixCache) insert(ids []int32) {
	if c.capBlocks == 0 {
		return
	}
	hs := blockHashes(ids)
	if len(hs) > c.capBlocks {
		hs = hs[:c.capBlocks] // the tail would be evicted at once
	}
	for _, h := range hs {
		if _, ok := c.index[h]; !ok {
			c.index[h] = c.lru.PushBack(h)
		}
	}
	c.touch(hs)
	for c.lru.Len() > c.capBlocks {
		e := c.lru.Back()
		delete(c.index, e.Value.(uint64))
		c.lru.Remove(e)
	}
}

// touch marks hs used, the head of the prefix most recently.
func (c *prefixCache) touch(hs []uint64) {
	for i := len(hs) - 1; i >= 0; i-- {
		c.lru.MoveToFront(c.index[hs[i]])
	}
}

func (c *prefixCache) usedTokens() int { return c.lru.Len() * blockSize }

func (c *prefixCache) reset() {
	c.lru.Init()
	clear(c.index)
}
