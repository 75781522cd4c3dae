from google.cloud import pubsub_v1  # reads PUBSUB_EMULATOR_HOST

topic, subscription = "projects/my-project/topics/my-topic", "projects/my-project/subscriptions/my-sub"
pub, sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
pub.create_topic(name=topic)
sub.create_subscription(name=subscription, topic=topic)
pub.publish(topic, b"hello", origin="readme").result()
for received in sub.pull(subscription=subscription, max_messages=1).received_messages:
    print(received.message.data, dict(received.message.attributes))
    sub.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
