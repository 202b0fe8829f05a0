package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestHeartbeatLibzmq: libzmq peers with ZMTP heartbeats on (as Dynamo sets
// them on its replica sockets) keep their connections to us through idle
// periods many heartbeat timeouts long: our SUB (Dial, blocked in Recv)
// and our PUB (a subscriber's reader) answer every PING with a PONG. Without
// the answer libzmq drops each connection once per interval + timeout
// (about twice in the script's 2.5 s idle period) and the messages sent
// after it can be lost while the SUB reconnects.
func TestHeartbeatLibzmq(t *testing.T) {
	requireDebianPyzmq(t)
	checkNoLeak(t)
	stdin, lines := pyScript(t, "testdata/heartbeat_peer.py")
	expect := func(prefix string) string {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, prefix) {
			t.Fatalf("script said %q (%v), want %q...", line, err, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	}
	say := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}

	port := expect("port ")
	pub, err := ListenPub(PubConfig{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := Dial(ctx, "tcp://127.0.0.1:"+port, Sub, Limits{MaxFrames: 2, MaxFrameSize: 1 << 10, MaxMessageSize: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Send([]byte{1}); err != nil { // subscribe to every topic
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		frames, err := sub.Recv(nil)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- fmt.Sprintf("%s", frames)
	}()
	say("connect " + pub.Endpoint())
	expect("ready")
	expect("sent")
	select {
	case m := <-got:
		if m != "[hb-test from-libzmq]" {
			t.Fatalf("our SUB received %s", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("our SUB received nothing")
	}
	if n := pub.Send("hb-test", [][]byte{[]byte("hb-test"), []byte("from-kvselect")}); n != 1 {
		t.Fatalf("our PUB sent to %d subscribers, want 1", n)
	}
	say("sent")
	var pubDrops, subDrops, received int
	if _, err := fmt.Sscanf(expect("result "), "%d %d %d", &pubDrops, &subDrops, &received); err != nil {
		t.Fatal(err)
	}
	if pubDrops != 0 || subDrops != 0 || received != 2 {
		t.Fatalf("libzmq dropped its PUB's connection to our SUB %d times and its SUB's to our PUB %d times; its SUB received %d frames, want 0, 0, 2",
			pubDrops, subDrops, received)
	}
}

// TestPingInsideMessage: a PING between two frames of a message (libzmq
// sends one when its heartbeat timer fires mid-message) is answered with a
// PONG echoing its context and is not part of the message; a command
// frame flagged MORE is a protocol error.
func TestPingInsideMessage(t *testing.T) {
	stream := cat(rawFrame(true, []byte("topic")), rawCommand("PING", []byte{0, 150, 'c', 'x'}), rawFrame(false, []byte("payload")))
	var out bytes.Buffer
	c := &Conn{bc: &bufConn{r: bufio.NewReader(bytes.NewReader(stream)), w: bufio.NewWriter(&out)}, lim: Limits{MaxFrames: 2, MaxFrameSize: 64, MaxMessageSize: 64}}
	frames, err := c.Recv(nil)
	if err != nil || len(frames) != 2 || string(frames[0]) != "topic" || string(frames[1]) != "payload" {
		t.Fatalf("Recv %q, %v", frames, err)
	}
	if want := "\x04\x07\x04PONGcx"; out.String() != want {
		t.Fatalf("wrote %q, want the PONG %q", out.String(), want)
	}
	more := rawCommand("PING", []byte{0, 1})
	more[0] |= flagMore
	c = &Conn{bc: &bufConn{r: bufio.NewReader(bytes.NewReader(more)), w: bufio.NewWriter(&out)}, lim: c.lim}
	if _, err := c.Recv(nil); !errors.Is(err, errProtocol) {
		t.Fatalf("a command flagged MORE: %v", err)
	}
}
