// Command gobench is the benchmark's load generator on the official Go client
// (cloud.google.com/go/pubsub/v2), driven by benchmarks/scenarios/goclient.py. It finds the
// gateway through PUBSUB_EMULATOR_HOST, as users point the client at an emulator.
//
//	gobench publish  --project P --topic T (--seconds S | --count N) [--outstanding N] [--attributes A]
//	gobench receive  --project P --subscription S --expected N [--goroutines G] [--max-outstanding M]
//	gobench latency  --project P --topic T --subscription S --rate R --seconds S
//
// Every mode takes --start-at (unix seconds, float): connect first, then wait for that instant,
// so that all generators of a measurement start together. Each prints one JSON object: count,
// t0, t1 (unix seconds), cpu_s (this process), and the mode's figures, among them `rpcs`: the
// RPCs and stream requests the client sent, counted by a gRPC interceptor (what the official
// client sends that a raw stream does not).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
)

const msgBytes = 1024

type flags map[string]string

func parseFlags(list []string) flags {
	f := flags{}
	for i := 0; i < len(list); i += 2 {
		if !strings.HasPrefix(list[i], "--") || i+1 >= len(list) {
			fail(fmt.Errorf("expected --name value pairs, got %q", list[i:]))
		}
		f[strings.TrimPrefix(list[i], "--")] = list[i+1]
	}
	return f
}

func (f flags) str(name string) string {
	v, ok := f[name]
	if !ok {
		fail(fmt.Errorf("--%s is required", name))
	}
	return v
}

func (f flags) num(name string, dflt float64) float64 {
	v, ok := f[name]
	if !ok {
		return dflt
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		fail(fmt.Errorf("--%s: %w", name, err))
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func waitUntil(at float64) {
	if d := time.Duration((at - unix(time.Now())) * 1e9); d > 0 {
		time.Sleep(d)
	}
}

// rpcCounter counts, per method, the unary calls and the streaming requests the client sends,
// and the ack ids they carry: acks, receipt/extension modacks (deadline > 0) and nacks (0).
type rpcCounter struct {
	mu     sync.Mutex
	counts map[string]int64
}

func (c *rpcCounter) add(key string, n int64) {
	if n == 0 {
		return
	}
	c.mu.Lock()
	c.counts[key] += n
	c.mu.Unlock()
}

func (c *rpcCounter) countRequest(prefix string, req any) {
	c.add(prefix, 1)
	switch r := req.(type) {
	case *pubsubpb.AcknowledgeRequest:
		c.add(prefix+" ack_ids", int64(len(r.GetAckIds())))
	case *pubsubpb.ModifyAckDeadlineRequest:
		kind := " modack_ids"
		if r.GetAckDeadlineSeconds() == 0 {
			kind = " nack_ids"
		}
		c.add(prefix+kind, int64(len(r.GetAckIds())))
		c.add(fmt.Sprintf("%s ack_deadline_seconds=%d", prefix, r.GetAckDeadlineSeconds()), 1)
	case *pubsubpb.PublishRequest:
		c.add(prefix+" messages", int64(len(r.GetMessages())))
	case *pubsubpb.StreamingPullRequest:
		c.add(prefix+" ack_ids", int64(len(r.GetAckIds())))
		modack, nack := int64(0), int64(0)
		for _, s := range r.GetModifyDeadlineSeconds() {
			if s == 0 {
				nack++
			} else {
				modack++
			}
		}
		c.add(prefix+" modack_ids", modack)
		c.add(prefix+" nack_ids", nack)
		if r.GetSubscription() != "" { // the first request: the stream's settings
			c.add(fmt.Sprintf("%s first: stream_ack_deadline_seconds=%d max_outstanding_messages=%d",
				prefix, r.GetStreamAckDeadlineSeconds(), r.GetMaxOutstandingMessages()), 1)
		}
		if len(r.GetAckIds()) == 0 && len(r.GetModifyDeadlineAckIds()) == 0 && r.GetSubscription() == "" {
			c.add(prefix+" empty (keepalive)", 1)
		}
	}
}

func shortName(method string) string { return method[strings.LastIndex(method, "/")+1:] }

func (c *rpcCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.countRequest(shortName(method), req)
	return invoker(ctx, method, req, reply, cc, opts...)
}

type countedStream struct {
	grpc.ClientStream
	c    *rpcCounter
	name string
}

func (s countedStream) SendMsg(m any) error {
	s.c.countRequest(s.name+" request", m)
	return s.ClientStream.SendMsg(m)
}

func (s countedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil {
		s.c.add(s.name+" response", 1)
	}
	return err
}

func (c *rpcCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	name := shortName(method)
	c.add(name+" opened", 1)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return countedStream{ClientStream: s, c: c, name: name}, nil
}

func newClient(ctx context.Context, project string, counter *rpcCounter) *pubsub.Client {
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		fail(errors.New("PUBSUB_EMULATOR_HOST is not set"))
	}
	client, err := pubsub.NewClient(ctx, project,
		option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(counter.unary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(counter.stream)),
	)
	if err != nil {
		fail(err)
	}
	return client
}

func payload() []byte {
	data := make([]byte, msgBytes)
	for i := range data {
		data[i] = 'x'
	}
	return data
}

// attributes: --attributes of them, as applications set them (short names, values of ~20
// characters); the same map for every message (the client only reads it).
func attributes(n int) map[string]string {
	if n == 0 {
		return nil
	}
	out := make(map[string]string, n)
	for i := 0; i < n; i++ {
		out[fmt.Sprintf("attr%d", i)] = fmt.Sprintf("value-%d-%012d", i, time.Now().UnixNano()%1e12)
	}
	return out
}

// publish: Publish in a loop with the default batching (10 ms, 100 messages, 1 MB) for
// --seconds, or until --count messages are published, at most --outstanding results unresolved
// (the default flow control ignores its limit, so the program bounds what it keeps in memory),
// each message with --attributes attributes. Counts the messages confirmed.
func publish(ctx context.Context, client *pubsub.Client, f flags) map[string]any {
	pub := client.Publisher(f.str("topic"))
	defer pub.Stop()
	seconds, outstanding := f.num("seconds", 8), int(f.num("outstanding", 5000))
	count := int64(f.num("count", 0))
	data, attrs := payload(), attributes(int(f.num("attributes", 0)))
	slots := make(chan struct{}, outstanding)
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	waitUntil(f.num("start-at", 0))
	cpu0, t0 := cpuSeconds(), time.Now()
	end := t0.Add(time.Duration(seconds * 1e9))
	for sent := int64(0); (count > 0 && sent < count) || (count == 0 && time.Now().Before(end)); sent++ {
		slots <- struct{}{}
		res := pub.Publish(ctx, &pubsub.Message{Data: data, Attributes: attrs})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := res.Get(ctx); err != nil {
				bad.Add(1)
			} else {
				ok.Add(1)
			}
			<-slots
		}()
	}
	wg.Wait()
	t1 := time.Now()
	return map[string]any{
		"count": ok.Load(), "errors": bad.Load(), "t0": unix(t0), "t1": unix(t1), "cpu_s": cpuSeconds() - cpu0,
	}
}

// receive: Subscriber.Receive with the default settings, or with --goroutines and
// --max-outstanding raised, acking in the callback, until --expected distinct messages arrived
// (or --deadline seconds passed). Duplicates: deliveries of a message id seen before.
func receive(ctx context.Context, client *pubsub.Client, f flags) map[string]any {
	sub := client.Subscriber(f.str("subscription"))
	if g := int(f.num("goroutines", 0)); g > 0 {
		sub.ReceiveSettings.NumGoroutines = g
	}
	if m := int(f.num("max-outstanding", 0)); m > 0 {
		sub.ReceiveSettings.MaxOutstandingMessages = m
	}
	expected := int(f.num("expected", 0))
	var mu sync.Mutex
	seen := make(map[string]struct{}, expected)
	deliveries := 0
	var first, last time.Time
	cctx, cancel := context.WithTimeout(ctx, time.Duration(f.num("deadline", 600)*1e9))
	defer cancel()
	waitUntil(f.num("start-at", 0))
	cpu0, t0 := cpuSeconds(), time.Now()
	err := sub.Receive(cctx, func(_ context.Context, m *pubsub.Message) {
		m.Ack()
		mu.Lock()
		deliveries++
		seen[m.ID] = struct{}{}
		last = time.Now()
		if first.IsZero() {
			first = last
		}
		if len(seen) >= expected {
			cancel()
		}
		mu.Unlock()
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fail(fmt.Errorf("Receive: %w", err))
	}
	mu.Lock()
	defer mu.Unlock()
	if last.IsZero() {
		last, first = t0, t0
	}
	return map[string]any{
		"count": len(seen), "deliveries": deliveries, "duplicates": deliveries - len(seen),
		"first_message_s": first.Sub(t0).Seconds(),
		"t0":              unix(t0), "t1": unix(last), "cpu_s": cpuSeconds() - cpu0,
		"goroutines": sub.ReceiveSettings.NumGoroutines, "max_outstanding": sub.ReceiveSettings.MaxOutstandingMessages,
	}
}

// latency: Publish at a fixed --rate for --seconds (default batching) while Receive (default
// settings) runs on the same client; latency = receive time - scheduled send time (attribute
// "sent_ns"), so a sender falling behind is counted.
func latency(ctx context.Context, client *pubsub.Client, f flags) map[string]any {
	pub := client.Publisher(f.str("topic"))
	sub := client.Subscriber(f.str("subscription"))
	rate, seconds := f.num("rate", 1000), f.num("seconds", 10)
	total := int(rate * seconds)
	var mu sync.Mutex
	lat := make([]float64, 0, total)
	seen := make(map[string]struct{}, total)
	deliveries := 0
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- sub.Receive(cctx, func(_ context.Context, m *pubsub.Message) {
			now := time.Now().UnixNano()
			m.Ack()
			sent, err := strconv.ParseInt(m.Attributes["sent_ns"], 10, 64)
			mu.Lock()
			defer mu.Unlock()
			deliveries++
			if _, dup := seen[m.ID]; dup || err != nil {
				return
			}
			seen[m.ID] = struct{}{}
			lat = append(lat, float64(now-sent)/1e6)
			if len(lat) >= total {
				cancel()
			}
		})
	}()
	data := payload()
	waitUntil(f.num("start-at", 0))
	cpu0, t0 := cpuSeconds(), time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	var sendErrs atomic.Int64
	for i := 0; i < total; i++ {
		due := t0.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		res := pub.Publish(ctx, &pubsub.Message{
			Data: data, Attributes: map[string]string{"sent_ns": strconv.FormatInt(due.UnixNano(), 10)},
		})
		go func() {
			if _, err := res.Get(ctx); err != nil {
				sendErrs.Add(1)
			}
		}()
	}
	pub.Flush()
	select {
	case <-done:
	case <-time.After(time.Duration((seconds + 30) * 1e9)):
		cancel()
		<-done
	}
	t1 := time.Now()
	mu.Lock()
	defer mu.Unlock()
	sort.Float64s(lat)
	at := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(q * float64(len(lat)))
		if i >= len(lat) {
			i = len(lat) - 1
		}
		return lat[i]
	}
	return map[string]any{
		"count": len(lat), "sent": total, "send_errors": sendErrs.Load(), "duplicates": deliveries - len(seen),
		"t0": unix(t0), "t1": unix(t1), "cpu_s": cpuSeconds() - cpu0,
		"p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": at(1),
	}
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: gobench publish|receive|latency --project P [--name value ...]"))
	}
	f := parseFlags(os.Args[2:])
	ctx := context.Background()
	counter := &rpcCounter{counts: map[string]int64{}}
	client := newClient(ctx, f.str("project"), counter)
	var result map[string]any
	switch os.Args[1] {
	case "publish":
		result = publish(ctx, client, f)
	case "receive":
		result = receive(ctx, client, f)
	case "latency":
		result = latency(ctx, client, f)
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
	if err := client.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
	}
	counter.mu.Lock()
	result["rpcs"] = counter.counts
	counter.mu.Unlock()
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fail(err)
	}
}
