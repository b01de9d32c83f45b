<?php

declare(strict_types=1);

namespace Leitstand;

/**
 * Verifies Leitstand's webhook deliveries.
 *
 * Header: `X-Leitstand-Signature: t=<unix time>,v1=<hex>` with v1 = HMAC-SHA256(secret, "<t>." . raw body).
 * Verify over the raw body (php://input), before decoding it; reject old timestamps (replays); then
 * deduplicate on the event's `id` (also in `X-Leitstand-Event-Id`): a delivery may come more than once.
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
     * exits when it does not verify.
     *
     * @return array<string, mixed>
     */
    public static function receive(string $secret, int $toleranceSeconds = 300): array
    {
        $rawBody = (string) file_get_contents('php://input');
        $header = $_SERVER['HTTP_X_LEITSTAND_SIGNATURE'] ?? null;
        try {
            return self::verify($secret, $header, $rawBody, $toleranceSeconds);
        } catch (SignatureError $e) {
            http_response_code(401);
            header('Content-Type: text/plain');
            echo $e->getMessage(), "\n";
            exit;
        }
    }
}
