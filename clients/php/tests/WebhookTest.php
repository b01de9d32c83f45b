<?php

declare(strict_types=1);

namespace Leitstand\Tests;

use Leitstand\SignatureError;
use Leitstand\Webhook;
use PHPUnit\Framework\TestCase;

/**
 * Both forms of a delivery's signature, as Leitstand signs them (workers/runtime/webhook.py): what
 * verifies, and every kind of forgery, alteration and replay that must not. The deliveries a real
 * server sends are verified by tests/api/test_php_client.py through examples/webhook_receiver.php.
 */
final class WebhookTest extends TestCase
{
    private const SECRET = 'php-core-secret-7';
    private const BODY = '{"id":"evt_1","type":"job.done"}';

    private static function leitstand(int $time, string $body = self::BODY, string $secret = self::SECRET): string
    {
        return 't=' . $time . ',v1=' . hash_hmac('sha256', $time . '.' . $body, $secret);
    }

    private static function standard(string $id, int $time, string $body = self::BODY,
                                     string $secret = self::SECRET): string
    {
        return 'v1,' . base64_encode(hash_hmac('sha256', $id . '.' . $time . '.' . $body, $secret, true));
    }

    public function testLeitstandsSignatureVerifies(): void
    {
        $this->assertSame('evt_1', Webhook::verify(self::SECRET, self::leitstand(time()), self::BODY)['id']);
    }

    /** @return array<string, array{0: ?string, 1: string}> */
    public static function leitstandForgeries(): array
    {
        $now = time();
        return [
            'another body' => [self::leitstand($now), self::BODY . ' '],
            'an altered event' => [self::leitstand($now), str_replace('done', 'dead', self::BODY)],
            'no signature' => [null, self::BODY],
            'an hour old' => [self::leitstand($now - 3600), self::BODY],
            'another secret' => [self::leitstand($now, self::BODY, 'wrong'), self::BODY],
            'not the header format' => ['v1,abc', self::BODY],
        ];
    }

    /** @dataProvider leitstandForgeries */
    public function testLeitstandsSignatureRefusesForgeries(?string $header, string $body): void
    {
        $this->expectException(SignatureError::class);
        Webhook::verify(self::SECRET, $header, $body);
    }

    public function testTheStandardWebhooksSignatureVerifiesAmongOthers(): void
    {
        $now = time();
        $signatures = 'v1,bm90IHRoaXMgb25l ' . self::standard('evt_1', $now);  // one matching is enough
        $event = Webhook::verifyStandard(self::SECRET, 'evt_1', (string) $now, $signatures, self::BODY);
        $this->assertSame('job.done', $event['type']);
    }

    /** @return array<string, array{0: ?string, 1: ?string, 2: ?string, 3: string}> */
    public static function standardForgeries(): array
    {
        $now = time();
        $id = 'evt_1';
        return [
            'another body' => [$id, (string) $now, self::standard($id, $now), self::BODY . ' '],
            'another secret' => [$id, (string) $now, self::standard($id, $now, self::BODY, 'wrong'), self::BODY],
            'another event ID, signed' => ['evt_2', (string) $now, self::standard('evt_2', $now), self::BODY],
            'a day old' => [$id, (string) ($now - 86400), self::standard($id, $now - 86400), self::BODY],
            'a timestamp not signed' => [$id, (string) ($now + 1), self::standard($id, $now), self::BODY],
            'no signature' => [$id, (string) $now, null, self::BODY],
            'no ID' => [null, (string) $now, self::standard($id, $now), self::BODY],
            'a version we do not know' => [$id, (string) $now, 'v2,' . substr(self::standard($id, $now), 3), self::BODY],
            'a timestamp that is not a number' => [$id, 'soon', self::standard($id, $now), self::BODY],
        ];
    }

    /** @dataProvider standardForgeries */
    public function testTheStandardWebhooksSignatureRefusesForgeries(?string $id, ?string $time, ?string $sig,
                                                                    string $body): void
    {
        $this->expectException(SignatureError::class);
        Webhook::verifyStandard(self::SECRET, $id, $time, $sig, $body);
    }

    public function testAnEmptySecretVerifiesNothing(): void
    {
        $this->expectException(SignatureError::class);
        Webhook::verify('', self::leitstand(time(), self::BODY, ''), self::BODY);
    }
}
