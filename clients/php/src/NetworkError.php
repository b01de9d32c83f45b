<?php

declare(strict_types=1);

namespace Leitstand;

/** The API could not be reached or did not answer, after every retry. */
final class NetworkError extends \RuntimeException
{
}
