package batching

import (
	"container/heap"
	"fmt"
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
//
// With a host tier (hierarchical cache) a node's KV is on the device (dev),
// in host memory (host), or both; a node only in host memory is "evicted"
// in SGLang's terms (mem_cache/hiradix_cache.py: value None, host_value
// set). Device nodes form a subtree from the root: eviction takes device
// leaves (_collect_leaves_device), and a load brings back a whole chain.
type node struct {
	parent   *node
	children children
	key      uint64
	off, n   int
	lock     int
	lastUse  float64
	id       uint64 // creation order: ties in the LRU order go to the older node
	at       [2]int // index in the leaves heap of each tier (devTier, hostTier); -1 when not in it
	dev      bool   // its KV is in the device pool
	host     bool   // a copy of its KV is in the host pool
	devKids  int    // children on the device
	hits     int    // inserts through it (write_through_selective)
	pinned   bool   // being loaded back: host memory keeps it (host_ref_counter)
}

// radix is the prefix cache as SGLang's RadixCache keeps it: a tree of
// token runs whose KV sits in the server's token pool. Running requests
// lock their prefix (inc_lock_ref up to the root); eviction removes
// unlocked leaves, least recently used first, whole (as _delete_leaf does),
// until enough tokens are freed.
type radix struct {
	root      *node
	leaves    lruHeap // unlocked device leaves (devTier)
	tokens    int     // device tokens held by the tree
	evictable int     // device tokens of unlocked nodes
	nextID    uint64

	// The host tier (HiRadixCache): hostCap tokens of host memory (0: none),
	// hostTokens of them in use, hostLeaves the nodes only in host memory
	// with no children (what evict_host may free), policy the write policy
	// and backupAfter the hits after which a node is written to host
	// (write_through_threshold).
	hostCap, hostTokens int
	hostLeaves          lruHeap // hostTier
	policy              string
	backupAfter         int
	stats               *Stats
}

func newRadix() *radix {
	return &radix{root: &node{at: [2]int{-1, -1}, lock: 1, dev: true}, stats: &Stats{}, hostLeaves: lruHeap{tier: hostTier}}
}

// newNode is a device node (not yet linked).
func (t *radix) newNode(parent *node, key uint64, off, n int, now float64) *node {
	t.nextID++
	return &node{parent: parent, key: key, off: off, n: n, lastUse: now, id: t.nextID, at: [2]int{-1, -1}, dev: true}
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
			t.touchedHost(c)
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
		lock: c.lock, lastUse: c.lastUse, id: t.nextID, at: [2]int{-1, -1},
		dev: c.dev, host: c.host, hits: c.hits}
	if c.dev {
		up.devKids = 1
	}
	c.parent.children.set(vtok{c.key, c.off}, up)
	c.parent = up
	c.off, c.n = c.off+m, c.n-m
	up.children.set(vtok{c.key, c.off}, c)
	return up
}

// device is the deepest device node on the path from the root to n and
// the tokens of the path below it (only in host memory).
func (t *radix) device(n *node) (*node, int) {
	inHost := 0
	for !n.dev {
		inHost += n.n
		n = n.parent
	}
	return n, inHost
}

// pin marks the host-only chain above last as being loaded back (pinned),
// or no longer (unpinned), so that host memory keeps it meanwhile.
func (t *radix) pin(last *node, pinned bool) {
	for n := last; !n.dev; n = n.parent {
		n.pinned = pinned
	}
}

// load brings the host-only chain above last back to the device (SGLang's
// load_back: all of it, after the device tokens were made free) and
// returns the tokens loaded.
func (t *radix) load(last *node) int {
	loaded := 0
	for n := last; !n.dev; n = n.parent {
		t.leftHost(n)
		n.dev = true
		n.parent.devKids++
		t.tokens += n.n
		t.evictable += n.n
		loaded += n.n
		t.touched(n)
		t.touched(n.parent)
	}
	return loaded
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
	// What of the path is only in host memory was computed again by the
	// request inserting it: its KV is on the device now (the
	// _insert_helper of HiRadixCache gives an evicted node the new value).
	if t.hostCap > 0 {
		added += t.load(cur)
		for n := cur; n != t.root; n = n.parent {
			t.hit(n)
		}
	}
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
		c := t.newNode(cur, s.Key, pos, n, now)
		if cur.children.get(vtok{s.Key, pos}) != nil {
			panic("batching: radix insert below a node that has the run already")
		}
		cur.children.set(vtok{s.Key, pos}, c)
		cur.devKids++
		t.left(cur)
		t.tokens += c.n
		t.evictable += c.n
		added += c.n
		t.touched(c)
		t.hit(c)
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
func (t *radix) evict(need int) int { return t.evictAs(need, false) }

// evictAs is evict; with drop, nodes are deleted whatever their host
// copies (a flush), else a node with a copy in host memory (written
// through, or now under write_back) stays in the tree there
// (_evict_backuped) and one without is deleted (_evict_regular).
func (t *radix) evictAs(need int, drop bool) int {
	freed := 0
	for freed < need && t.leaves.Len() > 0 {
		n := heap.Pop(&t.leaves).(*node)
		t.tokens -= n.n
		t.evictable -= n.n
		freed += n.n
		if !drop && t.hostCap > 0 && (n.host || (t.policy == WriteBack && t.backup(n))) {
			n.dev = false
			n.parent.devKids--
			t.stats.Offloaded += int64(n.n)
			t.touchedHost(n)
		} else {
			t.remove(n)
		}
		t.touched(n.parent)
	}
	return freed
}

// remove deletes device node n (its device tokens already counted out)
// with what is below it only in host memory, and frees its host copies.
func (t *radix) remove(n *node) {
	n.parent.children.del(vtok{n.key, n.off})
	if n.dev {
		n.parent.devKids--
	}
	var free func(x *node)
	free = func(x *node) {
		if x.host {
			t.hostTokens -= x.n
			x.host = false
		}
		t.leftHost(x)
		x.children.each(func(c *node) { free(c) })
	}
	free(n)
	t.touchedHost(n.parent)
}

// backup writes n's KV to host memory, freeing host-only leaves least
// recently used first when the host pool is full (write_backup, then
// evict_host); it reports whether n has a host copy now.
func (t *radix) backup(n *node) bool {
	if t.hostCap == 0 || n.host {
		return n.host
	}
	if short := t.hostTokens + n.n - t.hostCap; short > 0 {
		t.evictHost(short)
	}
	if t.hostTokens+n.n > t.hostCap {
		return false
	}
	n.host = true
	t.hostTokens += n.n
	t.stats.WrittenToHost += int64(n.n)
	return true
}

// hit counts an insert through n and writes n to host memory
// once it has had the write policy's hits (inc_hit_count: at once under
// write_through, after backupAfter under write_through_selective, never
// under write_back, which writes at eviction).
func (t *radix) hit(n *node) {
	if t.hostCap == 0 || n.host || t.policy == WriteBack || !n.dev {
		return
	}
	n.hits++
	if n.hits >= t.backupAfter {
		t.backup(n)
	}
}

// evictHost frees host-only leaves, least recently used first, until need
// host tokens are free or none is left (evict_host: only nodes evicted from
// the device, and none being loaded back); it returns the tokens freed.
func (t *radix) evictHost(need int) int {
	freed := 0
	var kept []*node
	defer func() {
		for _, n := range kept {
			heap.Push(&t.hostLeaves, n)
		}
	}()
	for freed < need && t.hostLeaves.Len() > 0 {
		n := heap.Pop(&t.hostLeaves).(*node)
		if n.pinned {
			kept = append(kept, n)
			continue
		}
		n.parent.children.del(vtok{n.key, n.off})
		n.host = false
		t.hostTokens -= n.n
		freed += n.n
		t.stats.HostEvicted += int64(n.n)
		t.touchedHost(n.parent)
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
		if n.dev {
			t.tokens -= n.n
			t.evictable -= n.n
			freed += n.n
		}
		t.remove(n)
		n = p
	}
	t.touched(n)
	return freed
}

// flush evicts every unlocked node, from host memory too (new weights make
// the cache useless; SGLang's flush_cache resets the host pool with the
// tree). It returns the device tokens freed.
func (t *radix) flush() int {
	t.evictHost(t.hostTokens + 1)
	return t.evictAs(t.tokens+1, true)
}

// touched puts n in the leaves heap if it is an unlocked leaf, or fixes its
// place after its lastUse changed.
func (t *radix) touched(n *node) {
	if n == t.root || n.lock > 0 || n.devKids > 0 || !n.dev {
		t.left(n)
		return
	}
	t.leaves.touch(n)
}

// left takes n out of the leaves heap if it is in it.
func (t *radix) left(n *node) { t.leaves.remove(n) }

// touchedHost puts n in the host leaves heap if it is only in host memory
// and has no children, or fixes its place.
func (t *radix) touchedHost(n *node) {
	if n == t.root || n.dev || n.children.len() > 0 {
		t.leftHost(n)
		return
	}
	t.hostLeaves.touch(n)
}

func (t *radix) leftHost(n *node) { t.hostLeaves.remove(n) }

// The tiers of lruHeap: the device's unlocked leaves, and the leaves held
// only in host memory.
const (
	devTier  = 0
	hostTier = 1
)

// lruHeap orders a tier's leaves least recently used first; each node
// keeps its index in it in at[tier].
type lruHeap struct {
	tier  int
	nodes []*node
}

// touch puts n in h, or fixes its place after its lastUse changed.
func (h *lruHeap) touch(n *node) {
	if i := n.at[h.tier]; i >= 0 {
		heap.Fix(h, i)
		return
	}
	heap.Push(h, n)
}

// remove takes n out of h if it is in it.
func (h *lruHeap) remove(n *node) {
	if i := n.at[h.tier]; i >= 0 {
		heap.Remove(h, i)
	}
}

func (h *lruHeap) Len() int { return len(h.nodes) }
func (h *lruHeap) Less(i, j int) bool {
	a, b := h.nodes[i], h.nodes[j]
	if a.lastUse != b.lastUse {
		return a.lastUse < b.lastUse
	}
	return a.id < b.id
}
func (h *lruHeap) Swap(i, j int) {
	h.nodes[i], h.nodes[j] = h.nodes[j], h.nodes[i]
	h.nodes[i].at[h.tier], h.nodes[j].at[h.tier] = i, j
}
func (h *lruHeap) Push(x any) {
	n := x.(*node)
	n.at[h.tier] = len(h.nodes)
	h.nodes = append(h.nodes, n)
}
func (h *lruHeap) Pop() any {
	last := len(h.nodes) - 1
	n := h.nodes[last]
	h.nodes[last] = nil
	h.nodes = h.nodes[:last]
	n.at[h.tier] = -1
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

// each calls f on every child.
func (c *children) each(f func(*node)) {
	if c.one != nil {
		f(c.one)
	}
	for _, n := range c.more {
		f(n)
	}
}

func (c *children) len() int {
	if c.one == nil {
		return 0
	}
	return 1 + len(c.more)
}

// checkHost verifies the host tier's accounting and the device subtree
// (tests).
func (t *radix) checkHost() error {
	host, dev := 0, 0
	var walk func(n *node) error
	walk = func(n *node) error {
		kids := 0
		var err error
		n.children.each(func(c *node) {
			if c.dev {
				kids++
				if !n.dev {
					err = fmt.Errorf("radix: a device node below a host-only one")
				}
			}
			if e := walk(c); e != nil {
				err = e
			}
		})
		if err != nil {
			return err
		}
		if kids != n.devKids {
			return fmt.Errorf("radix: node has %d device children, counted %d", kids, n.devKids)
		}
		if n != t.root {
			if n.host {
				host += n.n
			}
			if n.dev {
				dev += n.n
			}
			if !n.dev && !n.host {
				return fmt.Errorf("radix: a node neither on the device nor in host memory")
			}
		}
		return nil
	}
	if err := walk(t.root); err != nil {
		return err
	}
	if host != t.hostTokens || dev != t.tokens {
		return fmt.Errorf("radix: host %d / device %d tokens in the tree, counted %d / %d", host, dev, t.hostTokens, t.tokens)
	}
	if t.hostCap > 0 && t.hostTokens > t.hostCap {
		return fmt.Errorf("radix: %d host tokens of %d", t.hostTokens, t.hostCap)
	}
	return nil
}
