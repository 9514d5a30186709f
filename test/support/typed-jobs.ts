/** The kind → payload map the type tests check against. */

/** Two kinds: one payload with a required number, one with a required string and an optional number. */
export type InvoiceAndImageJobs = {
  send_invoice_email: { orderId: number };
  resize_image: { url: string; width?: number };
};
