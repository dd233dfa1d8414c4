import * as otel from '@opentelemetry/api';
import type { OpenTelemetryApi } from '../../src/observability/otel-api.js';

const a: OpenTelemetryApi = otel;
void a;
