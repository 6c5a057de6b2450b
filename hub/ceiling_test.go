package hub

import (
	"crypto/sha256"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// BenchmarkCeilingSHA256 is the rate of the one sequential sha256 a file
// needs, 4 MiB writes: the bound on one file's download with sha256 on.
// "busy" runs it while another goroutine spins, as the download's other
// work keeps the second core busy (on a VM whose two vCPUs may share a
// physical core, this is the rate the download sees).
func BenchmarkCeilingSHA256(b *testing.B) {
	buf := randomBytes(64<<20, 7)
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "busy"
		}
		b.Run(name, func(b *testing.B) {
			var stop atomic.Bool
			done := make(chan struct{})
			if busy {
				go func() {
					x := uint64(1)
					for !stop.Load() {
						for i := 0; i < 1000; i++ {
							x = x*6364136223846793005 + 1442695040888963407
						}
					}
					_ = x
					close(done)
				}()
			} else {
				close(done)
			}
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				h := sha256.New()
				for k := 0; k < len(buf); k += 4 << 20 {
					h.Write(buf[k : k+4<<20])
				}
				h.Sum(nil)
			}
			stop.Store(true)
			<-done
		})
	}
}

// BenchmarkCeilingLoopback is a bare TCP copy over loopback, both ends in
// this process, 1 MiB writes and reads, nothing stored or hashed: the cost
// of moving the bytes at all.
func BenchmarkCeilingLoopback(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Skip(err)
	}
	defer ln.Close()
	const size = 256 << 20
	go func() {
		buf := make([]byte, 1<<20)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			for n := 0; n < size; n += len(buf) {
				if _, err := c.Write(buf); err != nil {
					break
				}
			}
			c.Close()
		}
	}()
	buf := make([]byte, 1<<20)
	b.SetBytes(size)
	for b.Loop() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
		c.Close()
		if err != nil || n != size {
			b.Fatalf("copied %d of %d: %v", n, size, err)
		}
	}
}
