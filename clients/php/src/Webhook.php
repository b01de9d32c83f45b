<?php

declare(strict_types=1);

namespace Leitstand;

/**
 * Verifies Leitstand's webhook deliveries, in either of the forms it signs them with
 * (`LEITSTAND_WEBHOOK_SIGNATURES`: both by default):
 *
 * - Leitstand's own: `X-Leitstand-Signature: t=<unix time>,v1=<hex>` with
 *   v1 = HMAC-SHA256(secret, "<t>." . raw body) — `verify()`;
 * - Standard Webhooks: `webhook-id`, `webhook-timestamp` and `webhook-signature: v1,<base64>` with
 *   HMAC-SHA256(secret, "<id>.<timestamp>." . raw body) — `verifyStandard()`. (A Standard Webhooks
 *   library verifies it too, given "whsec_" . base64_encode($secret).)
 *
 * Verify over the raw body (php://input), before decoding it; reject old timestamps (replays); then
 * deduplicate on the event's `id` (also in `X-Leitstand-Event-Id` and `webhook-id`): a delivery may
 * come more than once.
 */
final class Webhook
{
    public const SIGNATURE_HEADER = 'X-Leitstand-Signature';

    /**
     * @return array<string, mixed> the event, decoded
     * @throws SignatureError
     */
    public static function verify(string $secret, ?string $signatureHeader, string $rawBody,
                                  int $toleranceSeconds = 300, ?int $now = null): array
    {
        if ($secret === '') {
            throw new SignatureError('no webhook secret configured');
        }
        if ($signatureHeader === null || $signatureHeader === '') {
            throw new SignatureError('the ' . self::SIGNATURE_HEADER . ' header is missing');
        }
        $parts = [];
        foreach (explode(',', $signatureHeader) as $part) {
            $pair = explode('=', trim($part), 2);
            if (count($pair) === 2) {
                $parts[$pair[0]] = $pair[1];
            }
        }
        if (!isset($parts['t'], $parts['v1']) || !ctype_digit($parts['t'])) {
            throw new SignatureError('the signature header is not t=<unix time>,v1=<hex>');
        }
        $timestamp = (int) $parts['t'];
        $now = $now ?? time();
        if (abs($now - $timestamp) > $toleranceSeconds) {
            throw new SignatureError(sprintf('the signature is %d s old; the tolerance is %d s', $now - $timestamp,
                                             $toleranceSeconds));
        }
        $expected = hash_hmac('sha256', $parts['t'] . '.' . $rawBody, $secret);
        if (!hash_equals($expected, $parts['v1'])) {
            throw new SignatureError('the signature does not match the body');
        }
        return self::event($rawBody);
    }

    /**
     * Verifies the Standard Webhooks form: `$id`, `$timestamp` and `$signature` are the values of the
     * `webhook-id`, `webhook-timestamp` and `webhook-signature` headers (the last may list several
     * space-separated `v1,<base64>` signatures; one matching is enough).
     *
     * @return array<string, mixed> the event, decoded
     * @throws SignatureError
     */
    public static function verifyStandard(string $secret, ?string $id, ?string $timestamp, ?string $signature,
                                          string $rawBody, int $toleranceSeconds = 300, ?int $now = null): array
    {
        if ($secret === '') {
            throw new SignatureError('no webhook secret configured');
        }
        if ($id === null || $id === '' || $timestamp === null || $signature === null || $signature === '') {
            throw new SignatureError('the webhook-id, webhook-timestamp and webhook-signature headers are required');
        }
        if (!ctype_digit($timestamp)) {
            throw new SignatureError('webhook-timestamp is not a unix time');
        }
        $now = $now ?? time();
        if (abs($now - (int) $timestamp) > $toleranceSeconds) {
            throw new SignatureError(sprintf('the signature is %d s old; the tolerance is %d s',
                                             $now - (int) $timestamp, $toleranceSeconds));
        }
        $expected = base64_encode(hash_hmac('sha256', $id . '.' . $timestamp . '.' . $rawBody, $secret, true));
        foreach (explode(' ', $signature) as $versioned) {
            $pair = explode(',', trim($versioned), 2);
            if (count($pair) === 2 && $pair[0] === 'v1' && hash_equals($expected, $pair[1])) {
                $event = self::event($rawBody);
                if ($event['id'] !== $id) {
                    throw new SignatureError('webhook-id does not name the signed event');
                }
                return $event;
            }
        }
        throw new SignatureError('no v1 signature matches the body');
    }

    /**
     * @return array<string, mixed>
     * @throws SignatureError
     */
    private static function event(string $rawBody): array
    {
        try {
            $event = json_decode($rawBody, true, 64, JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new SignatureError('the signed body is not JSON: ' . $e->getMessage());
        }
        if (!is_array($event) || !isset($event['id'], $event['type'])) {
            throw new SignatureError('the signed body is not a Leitstand event');
        }
        return $event;
    }

    /**
     * The W3C trace context a delivery carries — the trace its job was submitted in — as headers for an
     * OpenTelemetry propagator's `extract()`: `['traceparent' => …, 'tracestate' => …]`, empty without
     * one. Reads the current request (`$server`: `$_SERVER` unless given).
     *
     * @param array<string, mixed>|null $server
     * @return array<string, string>
     */
    public static function traceContext(?array $server = null): array
    {
        $server ??= $_SERVER;
        $context = [];
        foreach (['traceparent' => 'HTTP_TRACEPARENT', 'tracestate' => 'HTTP_TRACESTATE'] as $name => $key) {
            if (isset($server[$key]) && is_string($server[$key]) && $server[$key] !== '') {
                $context[$name] = $server[$key];
            }
        }
        return $context;
    }

    /**
     * Reads the current request (PHP's web SAPI), verifies it and returns the event; answers 401 and
     * exits when it does not verify. Leitstand's signature is checked when the delivery carries it,
     * else the Standard Webhooks one.
     *
     * @return array<string, mixed>
     */
    public static function receive(string $secret, int $toleranceSeconds = 300): array
    {
        $rawBody = (string) file_get_contents('php://input');
        try {
            if (isset($_SERVER['HTTP_WEBHOOK_SIGNATURE']) && !isset($_SERVER['HTTP_X_LEITSTAND_SIGNATURE'])) {
                return self::verifyStandard($secret, $_SERVER['HTTP_WEBHOOK_ID'] ?? null,
                                            $_SERVER['HTTP_WEBHOOK_TIMESTAMP'] ?? null,
                                            $_SERVER['HTTP_WEBHOOK_SIGNATURE'], $rawBody, $toleranceSeconds);
            }
            return self::verify($secret, $_SERVER['HTTP_X_LEITSTAND_SIGNATURE'] ?? null, $rawBody, $toleranceSeconds);
        } catch (SignatureError $e) {
            http_response_code(401);
            header('Content-Type: text/plain');
            echo $e->getMessage(), "\n";
            exit;
        }
    }
}
