import { SkiplockError } from '../errors.js';

/**
 * A command line that cannot work as given (a bad argument, a handlers file that
 * cannot be loaded): reported without a stack and ends the process with exit code 2.
 */
export class UsageError extends SkiplockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('USAGE', message, options);
    this.name = 'UsageError';
  }
}
