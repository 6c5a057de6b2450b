package tokenizer

// prioritized is an element of a heap: before reports whether it pops first.
type prioritized[T any] interface {
	before(T) bool
}

// heap is the binary heap both BPE merge loops use (SentencePiece's best
// score first, tokenizers' lowest rank first), each element ordering itself.
type heap[T prioritized[T]] struct{ h []T }

func newHeap[T prioritized[T]](capacity int) heap[T] { return heap[T]{h: make([]T, 0, capacity)} }

func (q *heap[T]) len() int { return len(q.h) }

func (q *heap[T]) push(it T) {
	q.h = append(q.h, it)
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.h[i].before(q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *heap[T]) pop() T {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	for i := 0; ; {
		l, best := 2*i+1, i
		if l < n && q.h[l].before(q.h[best]) {
			best = l
		}
		if l+1 < n && q.h[l+1].before(q.h[best]) {
			best = l + 1
		}
		if best == i {
			break
		}
		q.h[i], q.h[best] = q.h[best], q.h[i]
		i = best
	}
	return top
}
