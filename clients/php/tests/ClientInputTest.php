<?php

declare(strict_types=1);

namespace Leitstand\Tests;

use Leitstand\Client;
use PHPUnit\Framework\TestCase;

/**
 * What the client refuses before it builds a request, as the server would refuse it: nothing of a
 * caller's input may become a header line of its own. The client points at a closed port, so a
 * request it did send would end in a NetworkError instead.
 */
final class ClientInputTest extends TestCase
{
    /** @return iterable<string, array{string}> */
    public static function correlationIds(): iterable
    {
        yield 'CR LF and a header of its own' => ["abc\r\nX-Injected: yes"];
        yield 'a line feed' => ["abc\nX-Injected: yes"];
        yield 'a NUL' => ["abc\0def"];
        yield 'not ASCII' => ['bücher'];
        yield 'longer than 255' => [str_repeat('a', 256)];
    }

    /** @dataProvider correlationIds */
    public function testACorrelationIdTheServerWouldRefuseIsRefusedBeforeAnyRequest(string $id): void
    {
        $client = new Client('http://127.0.0.1:9', 'token', ['max_attempts' => 1, 'sleep' => static function (): void {
        }]);
        $this->expectException(\InvalidArgumentException::class);
        $this->expectExceptionMessage('correlation_id');
        $client->submitJob('synthetic', [], 'k-1', ['correlation_id' => $id]);
    }
}
