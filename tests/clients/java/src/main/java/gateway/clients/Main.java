package gateway.clients;

import com.google.api.core.ApiFuture;
import com.google.api.gax.batching.FlowControlSettings;
import com.google.api.gax.core.CredentialsProvider;
import com.google.api.gax.core.InstantiatingExecutorProvider;
import com.google.api.gax.core.NoCredentialsProvider;
import com.google.api.gax.grpc.GrpcTransportChannel;
import com.google.api.gax.rpc.ApiException;
import com.google.api.gax.rpc.FixedTransportChannelProvider;
import com.google.api.gax.rpc.TransportChannelProvider;
import com.google.cloud.pubsub.v1.AckReplyConsumer;
import com.google.cloud.pubsub.v1.AckReplyConsumerWithResponse;
import com.google.cloud.pubsub.v1.AckResponse;
import com.google.cloud.pubsub.v1.MessageReceiver;
import com.google.cloud.pubsub.v1.MessageReceiverWithAckResponse;
import com.google.cloud.pubsub.v1.Publisher;
import com.google.cloud.pubsub.v1.Subscriber;
import com.google.cloud.pubsub.v1.SubscriptionAdminClient;
import com.google.cloud.pubsub.v1.SubscriptionAdminSettings;
import com.google.cloud.pubsub.v1.TopicAdminClient;
import com.google.cloud.pubsub.v1.TopicAdminSettings;
import com.google.gson.GsonBuilder;
import com.google.protobuf.ByteString;
import com.google.protobuf.FieldMask;
import com.google.pubsub.v1.PubsubMessage;
import com.google.pubsub.v1.Subscription;
import com.google.pubsub.v1.Topic;
import com.google.pubsub.v1.UpdateSubscriptionRequest;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Consumer;

/**
 * Drives the gateway with the official Java client (google-cloud-pubsub), for
 * tests/e2e/test_official_clients.py.
 *
 * <pre>client SCENARIO --project P [--topic T] [--subscription S] [scenario flags...]</pre>
 *
 * <p>The Java client does not read PUBSUB_EMULATOR_HOST itself: as its emulator docs show, the
 * program gives every client a plaintext channel to that address and no credentials. Each
 * scenario prints one JSON object on stdout; errors go to stderr with a non-zero exit. The
 * scenarios, their flags and their JSON are the same in the Go, Java and Node programs.
 */
public final class Main {
  private static final String LANG = "java";

  private final Map<String, String> flags;
  private final TransportChannelProvider channels;
  private final CredentialsProvider credentials = NoCredentialsProvider.create();

  private Main(Map<String, String> flags, ManagedChannel channel) {
    this.flags = flags;
    this.channels = FixedTransportChannelProvider.create(GrpcTransportChannel.create(channel));
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      fail("usage: client SCENARIO --project P [--name value ...]");
    }
    Map<String, String> flags = new HashMap<>();
    for (int i = 1; i < args.length; i += 2) {
      if (!args[i].startsWith("--") || i + 1 >= args.length) {
        fail("expected --name value pairs, got " + args[i]);
      }
      flags.put(args[i].substring(2), args[i + 1]);
    }
    String host = System.getenv("PUBSUB_EMULATOR_HOST");
    if (host == null || host.isEmpty()) {
      fail("PUBSUB_EMULATOR_HOST is not set");
    }
    ManagedChannel channel = ManagedChannelBuilder.forTarget(host).usePlaintext().build();
    int code = 0;
    try {
      Main main = new Main(flags, channel);
      Object result =
          switch (args[0]) {
            case "admin-create" -> main.adminCreate();
            case "admin-delete" -> main.adminDelete();
            case "publish" -> main.publish();
            case "receive" -> main.receive();
            default -> throw new IllegalArgumentException("unknown scenario " + args[0]);
          };
      System.out.println(new GsonBuilder().disableHtmlEscaping().create().toJson(result));
    } catch (Exception e) {
      System.err.println("error: " + e);
      e.printStackTrace();
      code = 1;
    } finally {
      channel.shutdownNow();
    }
    System.out.flush();
    System.exit(code);  // the clients' executors are not all daemon threads
  }

  private static void fail(String message) {
    System.err.println("error: " + message);
    System.exit(1);
  }

  private String str(String name) {
    String v = flags.get(name);
    if (v == null) {
      throw new IllegalArgumentException("--" + name + " is required");
    }
    return v;
  }

  private int num(String name, int dflt) {
    String v = flags.get(name);
    return v == null ? dflt : Integer.parseInt(v);
  }

  private TopicAdminClient topicAdmin() throws Exception {
    return TopicAdminClient.create(
        TopicAdminSettings.newBuilder()
            .setTransportChannelProvider(channels)
            .setCredentialsProvider(credentials)
            .build());
  }

  private SubscriptionAdminClient subscriptionAdmin() throws Exception {
    return SubscriptionAdminClient.create(
        SubscriptionAdminSettings.newBuilder()
            .setTransportChannelProvider(channels)
            .setCredentialsProvider(credentials)
            .build());
  }

  private static Map<String, Object> topicJson(Topic t) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("name", t.getName());
    m.put("labels", new TreeMap<>(t.getLabelsMap()));
    return m;
  }

  private static Map<String, Object> subscriptionJson(Subscription s) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("name", s.getName());
    m.put("topic", s.getTopic());
    m.put("ack_deadline_seconds", s.getAckDeadlineSeconds());
    m.put("labels", new TreeMap<>(s.getLabelsMap()));
    m.put("enable_message_ordering", s.getEnableMessageOrdering());
    m.put("enable_exactly_once_delivery", s.getEnableExactlyOnceDelivery());
    return m;
  }

  private static boolean topicListed(TopicAdminClient admin, String project, String name) {
    for (Topic t : admin.listTopics("projects/" + project).iterateAll()) {
      if (t.getName().equals(name)) {
        return true;
      }
    }
    return false;
  }

  private static boolean subscriptionListed(
      SubscriptionAdminClient admin, String project, String name) {
    for (Subscription s : admin.listSubscriptions("projects/" + project).iterateAll()) {
      if (s.getName().equals(name)) {
        return true;
      }
    }
    return false;
  }

  /** Creates a topic and a subscription, reads and lists them, updates the subscription. */
  private Object adminCreate() throws Exception {
    String project = str("project");
    String topic = str("topic");
    String sub = str("subscription");
    try (TopicAdminClient topics = topicAdmin();
        SubscriptionAdminClient subs = subscriptionAdmin()) {
      topics.createTopic(Topic.newBuilder().setName(topic).putLabels("lang", LANG).build());
      Topic gotTopic = topics.getTopic(topic);
      boolean topicListed = topicListed(topics, project, topic);
      subs.createSubscription(
          Subscription.newBuilder()
              .setName(sub)
              .setTopic(topic)
              .setAckDeadlineSeconds(15)
              .putLabels("lang", LANG)
              .build());
      Subscription gotSub = subs.getSubscription(sub);
      boolean subListed = subscriptionListed(subs, project, sub);
      Subscription updated =
          subs.updateSubscription(
              UpdateSubscriptionRequest.newBuilder()
                  .setSubscription(
                      Subscription.newBuilder()
                          .setName(sub)
                          .setAckDeadlineSeconds(42)
                          .putLabels("lang", LANG)
                          .putLabels("updated", "yes"))
                  .setUpdateMask(
                      FieldMask.newBuilder()
                          .addPaths("ack_deadline_seconds")
                          .addPaths("labels"))
                  .build());
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("topic", topicJson(gotTopic));
      out.put("topic_listed", topicListed);
      out.put("subscription", subscriptionJson(gotSub));
      out.put("subscription_listed", subListed);
      out.put("updated", subscriptionJson(updated));
      return out;
    }
  }

  private interface Call {
    void run() throws Exception;
  }

  /** The gRPC code a call ended with: OK, or the ApiException's code (NOT_FOUND). */
  private static String codeOf(Call call) throws Exception {
    try {
      call.run();
      return "OK";
    } catch (ApiException e) {
      return e.getStatusCode().getCode().name();
    }
  }

  /** Deletes the subscription and the topic, then reads and lists them again. */
  private Object adminDelete() throws Exception {
    String project = str("project");
    String topic = str("topic");
    String sub = str("subscription");
    try (TopicAdminClient topics = topicAdmin();
        SubscriptionAdminClient subs = subscriptionAdmin()) {
      subs.deleteSubscription(sub);
      topics.deleteTopic(topic);
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("get_subscription", codeOf(() -> subs.getSubscription(sub)));
      out.put("get_topic", codeOf(() -> topics.getTopic(topic)));
      out.put("topic_listed", topicListed(topics, project, topic));
      out.put("subscription_listed", subscriptionListed(subs, project, sub));
      return out;
    }
  }

  /**
   * Publishes --per-key messages for each of --keys ordering keys (interleaved), with message
   * ordering enabled on the publisher, and --unkeyed messages without a key.
   */
  private Object publish() throws Exception {
    Publisher publisher =
        Publisher.newBuilder(str("topic"))
            .setChannelProvider(channels)
            .setCredentialsProvider(credentials)
            .setEnableMessageOrdering(true)
            .build();
    Map<String, ApiFuture<String>> futures = new LinkedHashMap<>();
    try {
      int keys = num("keys", 0);
      int perKey = num("per-key", 0);
      for (int i = 0; i < perKey; i++) {
        for (int k = 0; k < keys; k++) {
          String key = "k" + k;
          String data = key + ":" + i;
          PubsubMessage msg =
              PubsubMessage.newBuilder()
                  .setData(ByteString.copyFromUtf8(data))
                  .putAttributes("lang", LANG)
                  .putAttributes("key", key)
                  .putAttributes("seq", Integer.toString(i))
                  .setOrderingKey(key)
                  .build();
          futures.put(data, publisher.publish(msg));
        }
      }
      for (int j = 0; j < num("unkeyed", 0); j++) {
        String data = "free:" + j;
        PubsubMessage msg =
            PubsubMessage.newBuilder()
                .setData(ByteString.copyFromUtf8(data))
                .putAttributes("lang", LANG)
                .putAttributes("seq", Integer.toString(j))
                .build();
        futures.put(data, publisher.publish(msg));
      }
      Map<String, String> ids = new TreeMap<>();
      for (Map.Entry<String, ApiFuture<String>> e : futures.entrySet()) {
        ids.put(e.getKey(), e.getValue().get(60, TimeUnit.SECONDS));
      }
      return Map.of("ids", ids);
    } finally {
      publisher.shutdown();
      publisher.awaitTermination(30, TimeUnit.SECONDS);
    }
  }

  /** One way to settle a message: the plain consumer or the one that reports ack results. */
  private interface Reply {
    void nack();

    void ack(String data);
  }

  /**
   * Runs StreamingPull (a Subscriber) until --expect distinct messages were acked, then
   * --grace-ms more to catch redeliveries. Each message is settled --hold-ms after its callback,
   * off the callback, so that the client's flow control alone limits how many are out; the first
   * delivery of each message named in --nack is nacked. With --ack-result 1 the receiver is a
   * MessageReceiverWithAckResponse and each ack's AckResponse is reported.
   */
  private Object receive() throws Exception {
    int expect = num("expect", 0);
    int hold = num("hold-ms", 0);
    int grace = num("grace-ms", 1000);
    int timeout = num("timeout-s", 60);
    boolean withResult = num("ack-result", 0) == 1;
    Set<String> toNack = new HashSet<>();
    if (flags.containsKey("nack") && !flags.get("nack").isEmpty()) {
      toNack.addAll(List.of(flags.get("nack").split(",")));
    }
    Object lock = new Object();
    List<Map<String, Object>> deliveries = new ArrayList<>();
    List<String> acked = new ArrayList<>();
    List<String> nacked = new ArrayList<>();
    Map<String, String> ackResults = new TreeMap<>();
    Set<String> confirmed = new HashSet<>();
    int[] outstanding = {0, 0}; // current, max
    CountDownLatch reached = new CountDownLatch(1);
    long[] started = {System.nanoTime()};
    ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();

    BiConsumer<PubsubMessage, Reply> onMessage =
        (msg, reply) -> {
          String data = msg.getData().toString(StandardCharsets.UTF_8);
          synchronized (lock) {
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("data", data);
            d.put("attributes", new TreeMap<>(msg.getAttributesMap()));
            d.put("ordering_key", msg.getOrderingKey());
            d.put("message_id", msg.getMessageId());
            deliveries.add(d);
            if (deliveries.size() == 1) {
              log("first message", started[0]);
            }
            outstanding[0]++;
            outstanding[1] = Math.max(outstanding[1], outstanding[0]);
          }
          Runnable settle =
              () -> {
                boolean nack;
                synchronized (lock) {
                  nack = toNack.remove(data);
                  outstanding[0]--; // before the client hears of it
                  (nack ? nacked : acked).add(data);
                }
                if (nack) {
                  reply.nack();
                } else {
                  reply.ack(data);
                }
              };
          if (hold > 0) {
            timer.schedule(settle, hold, TimeUnit.MILLISECONDS);
          } else {
            settle.run();
          }
        };
    Consumer<String> noteConfirmed =
        data -> {
          synchronized (lock) {
            confirmed.add(data);
            if (confirmed.size() >= expect) {
              reached.countDown();
            }
          }
        };

    String subscription = str("subscription");
    Subscriber.Builder builder;
    if (withResult) {
      MessageReceiverWithAckResponse receiver =
          (PubsubMessage msg, AckReplyConsumerWithResponse consumer) ->
              onMessage.accept(
                  msg,
                  new Reply() {
                    @Override
                    public void nack() {
                      consumer.nack();
                    }

                    @Override
                    public void ack(String data) {
                      ApiFuture<AckResponse> future = consumer.ack();
                      future.addListener(
                          () -> {
                            String status;
                            try {
                              status = ackName(future.get());
                            } catch (Exception e) {
                              status = "OTHER: " + e;
                            }
                            synchronized (lock) {
                              ackResults.put(data, status);
                            }
                            noteConfirmed.accept(data);
                          },
                          Runnable::run);
                    }
                  });
      builder = Subscriber.newBuilder(subscription, receiver);
    } else {
      MessageReceiver receiver =
          (PubsubMessage msg, AckReplyConsumer consumer) ->
              onMessage.accept(
                  msg,
                  new Reply() {
                    @Override
                    public void nack() {
                      consumer.nack();
                    }

                    @Override
                    public void ack(String data) {
                      consumer.ack();
                      noteConfirmed.accept(data);
                    }
                  });
      builder = Subscriber.newBuilder(subscription, receiver);
    }
    builder
        .setChannelProvider(channels)
        .setCredentialsProvider(credentials)
        .setParallelPullCount(1)
        .setExecutorProvider(
            InstantiatingExecutorProvider.newBuilder().setExecutorThreadCount(2).build());
    int max = num("max-outstanding", 0);
    if (max > 0) {
      builder.setFlowControlSettings(
          FlowControlSettings.newBuilder()
              .setMaxOutstandingElementCount((long) max)
              .setMaxOutstandingRequestBytes(100L * 1024 * 1024)
              .build());
    }
    Subscriber subscriber = builder.build();
    long t0 = started[0];
    subscriber.startAsync().awaitRunning();
    log("running", t0);
    boolean timedOut = !reached.await(timeout, TimeUnit.SECONDS);
    log(timedOut ? "timed out" : "all confirmed", t0);
    if (!timedOut) {
      Thread.sleep(grace);
    }
    subscriber.stopAsync().awaitTerminated(30, TimeUnit.SECONDS);
    log("stopped", t0);
    timer.shutdownNow();
    synchronized (lock) {
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("deliveries", deliveries);
      out.put("acked", acked);
      out.put("nacked", nacked);
      out.put("ack_results", ackResults);
      out.put("max_outstanding", outstanding[1]);
      out.put("timed_out", timedOut);
      return out;
    }
  }

  private static void log(String what, long since) {
    System.err.printf("receive: %s after %.2f s%n", what, (System.nanoTime() - since) / 1e9);
  }

  private static String ackName(AckResponse response) {
    return response == AckResponse.SUCCESSFUL ? "SUCCESS" : response.name();
  }
}
