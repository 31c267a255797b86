package batching

import (
	"container/heap"
)

// Segment is a run of tokens of one content stream: positions 0..Tokens-1
// of the stream Key. Two inputs share a prefix exactly as far as they share
// leading segments' keys and lengths; a segment that is shorter than
// another of the same key is a prefix of it (a partial reply and the whole
// reply, say).
type Segment struct {
	Key    uint64
	Tokens int
}

// vtok is one virtual token: position pos of stream key.
type vtok struct {
	key uint64
	pos int
}

// node is a radix-tree node: tokens off..off+n-1 of stream key, below
// parent. lock counts the running requests whose prefix runs through it;
// only a node with no lock is evictable, and then so is every node below it.
type node struct {
	parent   *node
	children children
	key      uint64
	off, n   int
	lock     int
	lastUse  float64
	id       uint64 // creation order: ties in the LRU order go to the older node
	heapAt   int    // index in the leaves heap; -1 when not in it
}

// radix is the prefix cache as SGLang's RadixCache keeps it: a tree of
// token runs whose KV sits in the server's token pool. Running requests
// lock their prefix (inc_lock_ref up to the root); eviction removes
// unlocked leaves, least recently used first, whole (as _delete_leaf does),
// until enough tokens are freed.
type radix struct {
	root      *node
	leaves    leafHeap // unlocked leaves
	tokens    int      // tokens held by the tree
	evictable int      // tokens of unlocked nodes
	nextID    uint64
}

func newRadix() *radix {
	return &radix{root: &node{heapAt: -1, lock: 1}}
}

// match walks segs from the root and returns the deepest node fully
// matched and how many tokens matched. With split, a node matched only in
// part is split so that the match ends on a node boundary (SGLang's
// match_prefix splits likewise); without it the partial match is not
// counted past the last whole node. Every node on the path is touched at
// now.
func (t *radix) match(segs []Segment, split bool, now float64) (*node, int) {
	return t.matchUpTo(segs, -1, split, now)
}

// matchUpTo is match over the first limit tokens of segs (all when limit
// is negative).
func (t *radix) matchUpTo(segs []Segment, limit int, split bool, now float64) (*node, int) {
	cur, matched := t.root, 0
	for _, s := range segs {
		n := s.Tokens
		if limit >= 0 {
			n = min(n, limit-matched)
		}
		pos := 0
		for pos < n {
			c := cur.children.get(vtok{s.Key, pos})
			if c == nil {
				return cur, matched
			}
			m := min(c.n, n-pos)
			if m < c.n {
				if !split {
					return cur, matched
				}
				c = t.split(c, m)
			}
			c.lastUse = now
			t.touched(c)
			cur, matched, pos = c, matched+m, pos+m
		}
		if pos < s.Tokens { // the limit
			break
		}
	}
	return cur, matched
}

// split cuts c after its first m tokens and returns the upper part.
func (t *radix) split(c *node, m int) *node {
	t.nextID++
	up := &node{parent: c.parent, key: c.key, off: c.off, n: m,
		lock: c.lock, lastUse: c.lastUse, id: t.nextID, heapAt: -1}
	c.parent.children.set(vtok{c.key, c.off}, up)
	c.parent = up
	c.off, c.n = c.off+m, c.n-m
	up.children.set(vtok{c.key, c.off}, c)
	return up
}

// insert adds what of segs the tree lacks below the root, as one path, and
// returns the last node and how many tokens it added. The nodes added are
// unlocked (evictable) until someone locks them.
func (t *radix) insert(segs []Segment, now float64) (*node, int) {
	return t.insertUpTo(segs, -1, now)
}

// insertUpTo is insert of the first limit tokens of segs (all when limit
// is negative).
func (t *radix) insertUpTo(segs []Segment, limit int, now float64) (*node, int) {
	cur, depth := t.matchUpTo(segs, limit, true, now)
	left := limit - depth // tokens still to place under a limit
	added := 0
	for _, s := range segs {
		if depth >= s.Tokens {
			depth -= s.Tokens
			continue
		}
		pos := depth
		depth = 0
		n := s.Tokens - pos
		if limit >= 0 {
			n = min(n, left)
			left -= n
		}
		if n <= 0 {
			break
		}
		t.nextID++
		c := &node{parent: cur, key: s.Key, off: pos, n: n, lastUse: now, id: t.nextID, heapAt: -1}
		if cur.children.get(vtok{s.Key, pos}) != nil {
			panic("batching: radix insert below a node that has the run already")
		}
		cur.children.set(vtok{s.Key, pos}, c)
		t.left(cur)
		t.tokens += c.n
		t.evictable += c.n
		added += c.n
		t.touched(c)
		cur = c
	}
	return cur, added
}

// lock and unlock add and remove a running request's hold on the path from
// n to the root.
func (t *radix) lock(n *node) {
	for ; n != t.root; n = n.parent {
		if n.lock == 0 {
			t.evictable -= n.n
			t.left(n)
		}
		n.lock++
	}
}

func (t *radix) unlock(n *node) {
	for ; n != t.root; n = n.parent {
		n.lock--
		if n.lock == 0 {
			t.evictable += n.n
			t.touched(n)
		}
	}
}

// evict removes unlocked leaves, least recently used first, until need
// tokens are freed or none is left; it returns the tokens freed.
func (t *radix) evict(need int) int {
	freed := 0
	for freed < need && len(t.leaves) > 0 {
		n := heap.Pop(&t.leaves).(*node)
		n.parent.children.del(vtok{n.key, n.off})
		t.tokens -= n.n
		t.evictable -= n.n
		freed += n.n
		t.touched(n.parent)
	}
	return freed
}

// drop removes the unlocked tail of the path segs spell, deepest node
// first, up to the first node that is locked or has another child (a
// prefix someone else shares); it returns the tokens freed.
func (t *radix) drop(segs []Segment, now float64) int {
	n, _ := t.match(segs, false, now)
	freed := 0
	for n != t.root && n.lock == 0 && n.children.len() == 0 {
		p := n.parent
		t.left(n)
		p.children.del(vtok{n.key, n.off})
		t.tokens -= n.n
		t.evictable -= n.n
		freed += n.n
		n = p
	}
	t.touched(n)
	return freed
}

// flush evicts every unlocked node (new weights make the cache useless).
func (t *radix) flush() int { return t.evict(t.tokens + 1) }

// touched puts n in the leaves heap if it is an unlocked leaf, or fixes its
// place after its lastUse changed.
func (t *radix) touched(n *node) {
	if n == t.root || n.lock > 0 || n.children.len() > 0 {
		t.left(n)
		return
	}
	if n.heapAt >= 0 {
		heap.Fix(&t.leaves, n.heapAt)
		return
	}
	heap.Push(&t.leaves, n)
}

// left takes n out of the leaves heap if it is in it.
func (t *radix) left(n *node) {
	if n.heapAt >= 0 {
		heap.Remove(&t.leaves, n.heapAt)
	}
}

// leafHeap orders unlocked leaves least recently used first.
type leafHeap []*node

func (h leafHeap) Len() int { return len(h) }
func (h leafHeap) Less(i, j int) bool {
	if h[i].lastUse != h[j].lastUse {
		return h[i].lastUse < h[j].lastUse
	}
	return h[i].id < h[j].id
}
func (h leafHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapAt, h[j].heapAt = i, j
}
func (h *leafHeap) Push(x any) {
	n := x.(*node)
	n.heapAt = len(*h)
	*h = append(*h, n)
}
func (h *leafHeap) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.heapAt = -1
	return n
}

// children are a node's children by their first token. Most nodes have
// one (a trajectory's context is a chain), so it is kept apart from the
// map the others need.
type children struct {
	one  *node
	more map[vtok]*node
}

func (c *children) get(v vtok) *node {
	if c.one != nil && c.one.key == v.key && c.one.off == v.pos {
		return c.one
	}
	return c.more[v]
}

func (c *children) set(v vtok, n *node) {
	if c.one == nil || (c.one.key == v.key && c.one.off == v.pos) {
		c.one = n
		return
	}
	if c.more == nil {
		c.more = map[vtok]*node{}
	}
	c.more[v] = n
}

func (c *children) del(v vtok) {
	if c.one != nil && c.one.key == v.key && c.one.off == v.pos {
		c.one = nil
		for k, n := range c.more { // promote one; which does not matter
			c.one = n
			delete(c.more, k)
			break
		}
		return
	}
	delete(c.more, v)
}

func (c *children) len() int {
	if c.one == nil {
		return 0
	}
	return 1 + len(c.more)
}
