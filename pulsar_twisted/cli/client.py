"""
``pulsar-client``: produce and consume from the command line, as Pulsar's ``bin/pulsar-client``.

``pulsar-client produce TOPIC -m TEXT [-m TEXT ...] [-n N] [-k KEY] [-s SEPARATOR] [-p K=V ...]
[--url URL]``
    Sends each message (``-m`` values, each split on the separator, default ``,``) ``N`` times.
    Ends with ``N messages successfully produced``.

``pulsar-client consume TOPIC -s SUB [-n N] [-t Exclusive|Shared|Failover|Key_Shared]
[-p Earliest|Latest] [--url URL]``
    Receives ``N`` messages (0: until interrupted), acknowledging each, printing each as Pulsar
    does (``----- got message -----`` then ``key:[...], properties:[...], content:...``), and ends
    with ``N messages successfully consumed``.

``--url`` defaults to ``pulsar://localhost:6650`` (Pulsar's ``brokerServiceUrl``). Errors go to
stderr with exit code 1.
"""

import argparse
import sys

from twisted.internet import defer, task

from pulsar_twisted.client import errors

MESSAGE_BOUNDARY = "----- got message -----"
DEFAULT_URL = "pulsar://localhost:6650"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="pulsar-client", description=__doc__.split("\n\n")[0])
    top.add_argument("--url", default=DEFAULT_URL, help="broker service URL")
    commands = top.add_subparsers(dest="command", required=True)

    produce = commands.add_parser("produce", help="produce messages")
    produce.add_argument("topic")
    produce.add_argument("-m", "--messages", action="append", required=True,
                         help="message text (split on the separator); repeatable")
    produce.add_argument("-n", "--num-produce", type=int, default=1,
                         help="how many times to send each message")
    produce.add_argument("-k", "--key", default=None, help="partition key of every message")
    produce.add_argument("-s", "--separator", default=",", help="separator of -m values")
    produce.add_argument("-p", "--properties", action="append", default=[],
                         help="property key=value; repeatable")
    produce.add_argument("-c", "--chunking", action="store_true",
                         help="split messages over the broker's size limit into chunks")
    produce.add_argument("--url", dest="sub_url", default=None, help=argparse.SUPPRESS)

    consume = commands.add_parser("consume", help="consume messages")
    consume.add_argument("topic")
    consume.add_argument("-s", "--subscription-name", required=True)
    consume.add_argument("-n", "--num-messages", type=int, default=1,
                         help="how many messages to consume (0: forever)")
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-p", "--subscription-position", default="Latest",
                         choices=["Earliest", "Latest"])
    consume.add_argument("--hex", action="store_true", help="print the content as hex")
    consume.add_argument("--url", dest="sub_url", default=None, help=argparse.SUPPRESS)
    return top


def split_messages(values, separator: str):
    """The messages of the ``-m`` values, each split on ``separator`` (Pulsar's rule)."""
    out = []
    for value in values:
        out.extend(value.split(separator) if separator else [value])
    return out


def parse_properties(pairs) -> dict:
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise errors.InvalidConfiguration(f"property {pair!r} is not key=value")
        properties[key] = value
    return properties


def format_message(message, hex_content: bool = False) -> str:
    """One received message as Pulsar's CLI prints it (after the boundary line)."""
    key = message.partition_key() or None
    properties = ", ".join(f"{k}={v}" for k, v in message.properties().items())
    data = message.data()
    if hex_content:
        content = data.hex()
    else:
        content = data.decode("utf-8", errors="replace")
    return f"key:[{'null' if key is None else key}], properties:[{properties}], content:{content}"


@defer.inlineCallbacks
def produce(client, args, out):
    messages = split_messages(args.messages, args.separator)
    properties = parse_properties(args.properties) or None
    producer = yield client.create_producer(args.topic, chunking_enabled=args.chunking)
    sent = 0
    try:
        for _ in range(max(0, args.num_produce)):
            for text in messages:
                yield producer.send(text.encode("utf-8"), properties=properties,
                                    partition_key=args.key)
                sent += 1
    finally:
        yield producer.close()
    out.write(f"{sent} messages successfully produced\n")
    return sent


@defer.inlineCallbacks
def consume(client, args, out):
    consumer = yield client.subscribe(args.topic, args.subscription_name,
                                      consumer_type=args.subscription_type,
                                      initial_position=args.subscription_position)
    received = 0
    try:
        while args.num_messages <= 0 or received < args.num_messages:
            message = yield consumer.receive()
            out.write(MESSAGE_BOUNDARY + "\n")
            out.write(format_message(message, args.hex) + "\n")
            out.flush()
            yield consumer.acknowledge(message)
            received += 1
    finally:
        yield consumer.close()
    out.write(f"{received} messages successfully consumed\n")
    return received


def run(reactor, argv, out=None, err=None, client_factory=None):
    """Parse ``argv`` and run the command on ``reactor``; fires with the exit code."""
    out = out or sys.stdout
    err = err or sys.stderr
    args = parser().parse_args(argv)
    url = getattr(args, "sub_url", None) or args.url
    if client_factory is None:
        from pulsar_twisted.client.client import Client as client_factory
    client = client_factory(url, reactor=reactor, operation_timeout_seconds=30)
    action = produce if args.command == "produce" else consume

    def done(_):
        return client.close().addCallback(lambda _: 0)

    def failed(failure):
        err.write(f"pulsar-client {args.command}: {failure.getErrorMessage() or failure.type.__name__}\n")
        return client.close().addBoth(lambda _: 1)

    return action(client, args, out).addCallbacks(done, failed)


def main(argv=None):
    """Console-script entry point."""
    argv = sys.argv[1:] if argv is None else argv

    def go(reactor):
        return run(reactor, argv).addCallback(_exit_code)

    task.react(go)


def _exit_code(code):
    if code:
        raise SystemExit(code)
    return None


if __name__ == "__main__":
    main()
