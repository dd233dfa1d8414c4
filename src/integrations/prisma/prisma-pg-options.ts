import type { PrismaPg } from '@prisma/adapter-pg';

/** `@prisma/adapter-pg`'s own options (`schema`, `statementNameGenerator`, `userDefinedTypeParser` …). */
export type PrismaPgOptions = NonNullable<ConstructorParameters<typeof PrismaPg>[1]>;
