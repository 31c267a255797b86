package virtual

// event is something that happens at a virtual time.
type event struct {
	at   float64
	seq  uint64 // scheduling order: equal times happen in it
	kind eventKind
	i    int // the trajectory or replica it concerns
}

type eventKind uint8

const (
	evIteration    eventKind = iota + 1 // replica i's iteration in flight ends
	evSandboxReady                      // trajectory i's sandbox has started
	evEnvDone                           // trajectory i's command has run
	evResult                            // trajectory i's eval has run: it is finished
	evAdapt                             // the admission limit is reconsidered
	evPause                             // the trainer pauses generation for a weight sync
	evResume                            // and resumes it with the next weight version
	evSample                            // the KV pools' use is sampled
	evReleased                          // trajectory i, let go, has its held gen step back
)

// queue is a min-heap of events by (at, seq): one event order for one
// input, whatever the platform.
type queue struct {
	h   []event
	seq uint64
}

func (q *queue) push(at float64, kind eventKind, i int) {
	q.seq++
	q.h = append(q.h, event{at: at, seq: q.seq, kind: kind, i: i})
	for j := len(q.h) - 1; j > 0; {
		p := (j - 1) / 2
		if !q.less(j, p) {
			break
		}
		q.h[j], q.h[p] = q.h[p], q.h[j]
		j = p
	}
}

func (q *queue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h = q.h[:last]
	for j := 0; ; {
		l, r, m := 2*j+1, 2*j+2, j
		if l < len(q.h) && q.less(l, m) {
			m = l
		}
		if r < len(q.h) && q.less(r, m) {
			m = r
		}
		if m == j {
			break
		}
		q.h[j], q.h[m] = q.h[m], q.h[j]
		j = m
	}
	return top
}

func (q *queue) less(a, b int) bool {
	if q.h[a].at != q.h[b].at {
		return q.h[a].at < q.h[b].at
	}
	return q.h[a].seq < q.h[b].seq
}

func (q *queue) len() int { return len(q.h) }

// fifo is a queue of trajectory indices.
type fifo struct {
	items []int
	head  int
}

func (f *fifo) push(i int) { f.items = append(f.items, i) }
func (f *fifo) len() int   { return len(f.items) - f.head }
func (f *fifo) pop() int {
	i := f.items[f.head]
	f.head++
	if f.head > 1024 && f.head*2 > len(f.items) {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
	return i
}
