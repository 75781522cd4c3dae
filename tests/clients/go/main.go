// Command client drives the gateway with the official Go client (cloud.google.com/go/pubsub/v2),
// for tests/e2e/test_official_clients.py. It finds the gateway through PUBSUB_EMULATOR_HOST, as
// users point the client at an emulator.
//
//	client SCENARIO --project P [--topic T] [--subscription S] [scenario flags...]
//
// Each scenario prints one JSON object on stdout; errors go to stderr with a non-zero exit. The
// scenarios, their flags and their JSON are the same in the Go, Java and Node programs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/iterator"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

const lang = "go"

type flags map[string]string

func parseFlags(list []string) (flags, error) {
	f := flags{}
	for i := 0; i < len(list); i += 2 {
		if !strings.HasPrefix(list[i], "--") || i+1 >= len(list) {
			return nil, fmt.Errorf("expected --name value pairs, got %q", list[i:])
		}
		f[strings.TrimPrefix(list[i], "--")] = list[i+1]
	}
	return f, nil
}

func (f flags) str(name string) string {
	v, ok := f[name]
	if !ok {
		fail(fmt.Errorf("--%s is required", name))
	}
	return v
}

func (f flags) num(name string, dflt int) int {
	v, ok := f[name]
	if !ok {
		return dflt
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fail(fmt.Errorf("--%s: %w", name, err))
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "error:", err)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: client SCENARIO --project P [--name value ...]"))
	}
	f, err := parseFlags(os.Args[2:])
	if err != nil {
		fail(err)
	}
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" {
		fail(errors.New("PUBSUB_EMULATOR_HOST is not set"))
	}
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, f.str("project"))
	if err != nil {
		fail(err)
	}
	defer client.Close()
	var result any
	switch os.Args[1] {
	case "admin-create":
		result, err = adminCreate(ctx, client, f)
	case "admin-delete":
		result, err = adminDelete(ctx, client, f)
	case "publish":
		result, err = publish(ctx, client, f)
	case "receive":
		result, err = receive(ctx, client, f)
	default:
		err = fmt.Errorf("unknown scenario %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fail(err)
	}
}

func topicJSON(t *pubsubpb.Topic) map[string]any {
	return map[string]any{"name": t.GetName(), "labels": nonNil(t.GetLabels())}
}

func subscriptionJSON(s *pubsubpb.Subscription) map[string]any {
	return map[string]any{
		"name":                         s.GetName(),
		"topic":                        s.GetTopic(),
		"ack_deadline_seconds":         s.GetAckDeadlineSeconds(),
		"labels":                       nonNil(s.GetLabels()),
		"enable_message_ordering":      s.GetEnableMessageOrdering(),
		"enable_exactly_once_delivery": s.GetEnableExactlyOnceDelivery(),
	}
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func topicListed(ctx context.Context, client *pubsub.Client, project, name string) (bool, error) {
	it := client.TopicAdminClient.ListTopics(ctx, &pubsubpb.ListTopicsRequest{Project: "projects/" + project})
	for {
		t, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if t.GetName() == name {
			return true, nil
		}
	}
}

func subscriptionListed(ctx context.Context, client *pubsub.Client, project, name string) (bool, error) {
	it := client.SubscriptionAdminClient.ListSubscriptions(
		ctx, &pubsubpb.ListSubscriptionsRequest{Project: "projects/" + project})
	for {
		s, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if s.GetName() == name {
			return true, nil
		}
	}
}

// adminCreate creates a topic and a subscription, reads both back, lists them and updates the
// subscription's ack deadline and labels.
func adminCreate(ctx context.Context, client *pubsub.Client, f flags) (any, error) {
	project, topic, sub := f.str("project"), f.str("topic"), f.str("subscription")
	topics, subs := client.TopicAdminClient, client.SubscriptionAdminClient
	if _, err := topics.CreateTopic(ctx, &pubsubpb.Topic{Name: topic, Labels: map[string]string{"lang": lang}}); err != nil {
		return nil, fmt.Errorf("CreateTopic: %w", err)
	}
	gotTopic, err := topics.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	if err != nil {
		return nil, fmt.Errorf("GetTopic: %w", err)
	}
	tListed, err := topicListed(ctx, client, project, topic)
	if err != nil {
		return nil, fmt.Errorf("ListTopics: %w", err)
	}
	_, err = subs.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 15, Labels: map[string]string{"lang": lang},
	})
	if err != nil {
		return nil, fmt.Errorf("CreateSubscription: %w", err)
	}
	gotSub, err := subs.GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	if err != nil {
		return nil, fmt.Errorf("GetSubscription: %w", err)
	}
	sListed, err := subscriptionListed(ctx, client, project, sub)
	if err != nil {
		return nil, fmt.Errorf("ListSubscriptions: %w", err)
	}
	updated, err := subs.UpdateSubscription(ctx, &pubsubpb.UpdateSubscriptionRequest{
		Subscription: &pubsubpb.Subscription{
			Name: sub, AckDeadlineSeconds: 42, Labels: map[string]string{"lang": lang, "updated": "yes"},
		},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"ack_deadline_seconds", "labels"}},
	})
	if err != nil {
		return nil, fmt.Errorf("UpdateSubscription: %w", err)
	}
	return map[string]any{
		"topic":               topicJSON(gotTopic),
		"topic_listed":        tListed,
		"subscription":        subscriptionJSON(gotSub),
		"subscription_listed": sListed,
		"updated":             subscriptionJSON(updated),
	}, nil
}

// codeName is the gRPC status code of err as the other programs print it: NOT_FOUND, OK.
func codeName(err error) string {
	var b strings.Builder
	for i, r := range status.Code(err).String() {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// adminDelete deletes the subscription and the topic, then reads and lists them again.
func adminDelete(ctx context.Context, client *pubsub.Client, f flags) (any, error) {
	project, topic, sub := f.str("project"), f.str("topic"), f.str("subscription")
	if err := client.SubscriptionAdminClient.DeleteSubscription(
		ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: sub}); err != nil {
		return nil, fmt.Errorf("DeleteSubscription: %w", err)
	}
	if err := client.TopicAdminClient.DeleteTopic(ctx, &pubsubpb.DeleteTopicRequest{Topic: topic}); err != nil {
		return nil, fmt.Errorf("DeleteTopic: %w", err)
	}
	_, subErr := client.SubscriptionAdminClient.GetSubscription(
		ctx, &pubsubpb.GetSubscriptionRequest{Subscription: sub})
	_, topicErr := client.TopicAdminClient.GetTopic(ctx, &pubsubpb.GetTopicRequest{Topic: topic})
	tListed, err := topicListed(ctx, client, project, topic)
	if err != nil {
		return nil, err
	}
	sListed, err := subscriptionListed(ctx, client, project, sub)
	if err != nil {
		return nil, err
	}
	if c := status.Code(subErr); subErr != nil && c != codes.NotFound {
		return nil, fmt.Errorf("GetSubscription after delete: %w", subErr)
	}
	return map[string]any{
		"get_subscription":    codeName(subErr),
		"get_topic":           codeName(topicErr),
		"topic_listed":        tListed,
		"subscription_listed": sListed,
	}, nil
}

// publish publishes --per-key messages for each of --keys ordering keys (interleaved), with
// message ordering enabled on the publisher, and --unkeyed messages without a key.
func publish(ctx context.Context, client *pubsub.Client, f flags) (any, error) {
	p := client.Publisher(f.str("topic"))
	p.EnableMessageOrdering = true
	defer p.Stop()
	keys, perKey, unkeyed := f.num("keys", 0), f.num("per-key", 0), f.num("unkeyed", 0)
	type pending struct {
		data string
		res  *pubsub.PublishResult
	}
	var all []pending
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			key := fmt.Sprintf("k%d", k)
			data := fmt.Sprintf("%s:%d", key, i)
			msg := &pubsub.Message{
				Data:        []byte(data),
				Attributes:  map[string]string{"lang": lang, "key": key, "seq": strconv.Itoa(i)},
				OrderingKey: key,
			}
			all = append(all, pending{data, p.Publish(ctx, msg)})
		}
	}
	for j := 0; j < unkeyed; j++ {
		data := fmt.Sprintf("free:%d", j)
		msg := &pubsub.Message{Data: []byte(data), Attributes: map[string]string{"lang": lang, "seq": strconv.Itoa(j)}}
		all = append(all, pending{data, p.Publish(ctx, msg)})
	}
	ids := map[string]string{}
	for _, m := range all {
		id, err := m.res.Get(ctx)
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.data, err)
		}
		ids[m.data] = id
	}
	return map[string]any{"ids": ids}, nil
}

type delivery struct {
	Data        string            `json:"data"`
	Attributes  map[string]string `json:"attributes"`
	OrderingKey string            `json:"ordering_key"`
	MessageID   string            `json:"message_id"`
}

func ackStatusName(s pubsub.AcknowledgeStatus, err error) string {
	var name string
	switch s {
	case pubsub.AcknowledgeStatusSuccess:
		name = "SUCCESS"
	case pubsub.AcknowledgeStatusPermissionDenied:
		name = "PERMISSION_DENIED"
	case pubsub.AcknowledgeStatusFailedPrecondition:
		name = "FAILED_PRECONDITION"
	case pubsub.AcknowledgeStatusInvalidAckID:
		name = "INVALID"
	default:
		name = "OTHER"
	}
	if err != nil {
		name += ": " + err.Error()
	}
	return name
}

// receive runs StreamingPull (Subscriber.Receive) until --expect distinct messages were acked,
// then --grace-ms more to catch redeliveries. Each message is settled --hold-ms after its
// callback, off the callback, so that the client's flow control alone limits how many are out;
// the first delivery of each message named in --nack is nacked. With --ack-result the acks use
// AckWithResult and report its status.
func receive(ctx context.Context, client *pubsub.Client, f flags) (any, error) {
	sub := client.Subscriber(f.str("subscription"))
	sub.ReceiveSettings.NumGoroutines = 1
	if n := f.num("max-outstanding", 0); n > 0 {
		sub.ReceiveSettings.MaxOutstandingMessages = n
	}
	expect := f.num("expect", 0)
	hold := time.Duration(f.num("hold-ms", 0)) * time.Millisecond
	grace := time.Duration(f.num("grace-ms", 1000)) * time.Millisecond
	timeout := time.Duration(f.num("timeout-s", 60)) * time.Second
	withResult := f.num("ack-result", 0) == 1
	toNack := map[string]bool{}
	if v := f["nack"]; v != "" {
		for _, d := range strings.Split(v, ",") {
			toNack[d] = true
		}
	}

	var mu sync.Mutex
	deliveries := []delivery{}
	acked, nacked := []string{}, []string{}
	ackResults := map[string]string{}
	confirmed := map[string]bool{}
	outstanding, maxOutstanding := 0, 0
	reached := make(chan struct{})
	var once sync.Once
	// noteDone is called with mu held.
	noteDone := func(data string) {
		confirmed[data] = true
		if len(confirmed) >= expect {
			once.Do(func() { close(reached) })
		}
	}

	settle := func(m *pubsub.Message) {
		data := string(m.Data)
		mu.Lock()
		nack := toNack[data]
		delete(toNack, data)
		outstanding-- // before the client hears of it, so that a new delivery cannot be counted early
		if nack {
			nacked = append(nacked, data)
		} else {
			acked = append(acked, data)
		}
		mu.Unlock()
		switch {
		case nack:
			m.Nack()
		case withResult:
			st, err := m.AckWithResult().Get(ctx)
			mu.Lock()
			ackResults[data] = ackStatusName(st, err)
			noteDone(data)
			mu.Unlock()
		default:
			m.Ack()
			mu.Lock()
			noteDone(data)
			mu.Unlock()
		}
	}

	started := time.Now()
	logf := func(what string) {
		fmt.Fprintf(os.Stderr, "receive: %s after %.2f s\n", what, time.Since(started).Seconds())
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timedOut := false
	go func() {
		select {
		case <-reached:
			logf("all confirmed")
			time.Sleep(grace)
		case <-time.After(timeout):
			logf("timed out")
			mu.Lock()
			timedOut = true
			mu.Unlock()
		}
		cancel()
	}()
	err := sub.Receive(rctx, func(_ context.Context, m *pubsub.Message) {
		mu.Lock()
		deliveries = append(deliveries, delivery{
			Data: string(m.Data), Attributes: nonNil(m.Attributes), OrderingKey: m.OrderingKey, MessageID: m.ID,
		})
		if len(deliveries) == 1 {
			logf("first message")
		}
		outstanding++
		if outstanding > maxOutstanding {
			maxOutstanding = outstanding
		}
		mu.Unlock()
		if hold > 0 {
			go func() {
				time.Sleep(hold)
				settle(m)
			}()
		} else {
			settle(m)
		}
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("Receive: %w", err)
	}
	logf("stopped")
	mu.Lock()
	defer mu.Unlock()
	return map[string]any{
		"deliveries":      deliveries,
		"acked":           acked,
		"nacked":          nacked,
		"ack_results":     ackResults,
		"max_outstanding": maxOutstanding,
		"timed_out":       timedOut,
	}, nil
}
