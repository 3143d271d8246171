package main

import (
	"net"
	"sync"
)

// limitListener accepts at most n open connections at once: Accept waits
// while n are open, so further clients wait in the kernel's accept queue
// instead of each holding a goroutine and buffers here.
func limitListener(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limited{Listener: l, slots: make(chan struct{}, n)}
}

type limited struct {
	net.Listener
	slots chan struct{}
}

func (l *limited) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
